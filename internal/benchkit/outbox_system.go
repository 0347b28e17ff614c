package benchkit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
)

// Outbox is this project as a System: store/postgres and the relay, in
// process, delivering to a sink that hands the payloads to the benchmark.
type Outbox struct {
	// Label is the name in the report. Default "outbox".
	Label string
	// Store configures the PostgreSQL store. Table defaults to
	// "outbox_events"; per-aggregate ordering (the advisory lock) is on
	// unless Store.NoAggregateLock is set.
	Store postgres.Config
	// Relay configures the relay; Store, Sink and Logger are filled in.
	// A zero BatchSize takes Env.Batch, then the relay's default; other
	// zero fields take the relay's defaults.
	Relay relay.Config
	// Wakeups chooses how the relay learns of new events. Default
	// WakeAll.
	Wakeups Wakeups
	// RelayConns sizes the relay's pool. Default 4.
	RelayConns int
	// Observe, when set, runs beside each relay: it returns the relay's
	// Config.Observer and a function called after the relay stops (the
	// benchmark of the metrics' cost).
	Observe func(ctx context.Context, st store.Store) (obs relay.Observer, stop func())

	env      Env
	storeCfg postgres.Config // as Setup completed it
	pool     *pgxpool.Pool
	store    *postgres.Store // the relay's
	producer *postgres.Store // the producers'
}

// Wakeups is how a relay learns that events were committed.
type Wakeups int

const (
	// WakeAll: producers and relay share one Store, so an Enqueue in this
	// process nudges the relay directly (the hybrid path), and
	// LISTEN/NOTIFY wakes it for the rest.
	WakeAll Wakeups = iota
	// WakeNotify: producers write through their own Store, as if the relay
	// ran in another process; only LISTEN/NOTIFY and polling wake it.
	WakeNotify
	// WakePoll: no NOTIFY, no LISTEN, no nudge: polling alone.
	WakePoll
)

var _ System = (*Outbox)(nil)

// Name implements System.
func (o *Outbox) Name() string {
	if o.Label != "" {
		return o.Label
	}
	return "outbox"
}

// Setup opens the relay's pool and applies the migrations.
func (o *Outbox) Setup(ctx context.Context, env Env) error {
	// The relay's pool as the store's docs ask for one (ConfigurePool).
	pool, err := env.NewPoolWith(ctx, max(o.RelayConns, 4), postgres.ConfigurePool)
	if err != nil {
		return err
	}
	cfg := o.Store
	if cfg.Logger == nil {
		cfg.Logger = env.Logger
	}
	if o.Wakeups == WakePoll {
		cfg.NoNotify = true
		o.Relay.NoListen = true
	}
	s, err := postgres.New(pool, cfg)
	if err != nil {
		pool.Close()
		return err
	}
	o.producer = s
	if o.Wakeups != WakeAll {
		// A Store of their own: the relay hears nothing from it in process.
		if o.producer, err = postgres.New(pool, cfg); err != nil {
			pool.Close()
			return err
		}
	}
	if _, err := s.MigrateUp(ctx); err != nil {
		pool.Close()
		return fmt.Errorf("migrate: %w", err)
	}
	if o.Relay.BatchSize == 0 {
		o.Relay.BatchSize = env.Batch
	}
	if o.Relay.Logger == nil {
		o.Relay.Logger = env.Logger
	}
	o.pool, o.store, o.env, o.storeCfg = pool, s, env, cfg
	return nil
}

func (o *Outbox) event(ev Event) outbox.Event {
	return outbox.Event{AggregateType: "payment", AggregateID: ev.Aggregate, EventType: "PaymentCaptured", Payload: ev.Payload}
}

// Produce enqueues ev in tx.
func (o *Outbox) Produce(ctx context.Context, tx pgx.Tx, ev Event) error {
	_, err := o.producer.Enqueue(ctx, tx, o.event(ev))
	return err
}

// loadChunk is how many events one Load transaction enqueues.
const loadChunk = 5000

// Load enqueues events with multi-row inserts, loadChunk per transaction.
func (o *Outbox) Load(ctx context.Context, events []Event) error {
	batch := make([]outbox.Event, 0, loadChunk)
	for start := 0; start < len(events); start += loadChunk {
		batch = batch[:0]
		for _, ev := range events[start:min(start+loadChunk, len(events))] {
			batch = append(batch, o.event(ev))
		}
		err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
			_, err := o.producer.Enqueue(ctx, tx, batch...)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// StartRelay runs a relay in process until stop.
func (o *Outbox) StartRelay(ctx context.Context, s Sink) (func() error, error) {
	cfg := o.Relay
	cfg.Store = o.store
	cfg.Sink = &funcSink{fn: s}
	stopObserver := func() {}
	if o.Observe != nil {
		cfg.Observer, stopObserver = o.Observe(ctx, o.store)
	}
	r, err := relay.New(cfg)
	if err != nil {
		stopObserver()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return func() error {
		cancel()
		err := <-done
		stopObserver()
		return err
	}, nil
}

// Pending counts the events the relay can still move.
func (o *Outbox) Pending(ctx context.Context) (int64, error) {
	return o.store.CountMovable(ctx, true)
}

// Reset empties the outbox, dead-letter, attempts and delivery tables
// (the outbox's truncate trigger resets the lanes and their claims).
func (o *Outbox) Reset(ctx context.Context) error {
	t := o.store.Tables()
	_, err := o.pool.Exec(ctx, fmt.Sprintf(`TRUNCATE %s, %s, %s, %s RESTART IDENTITY`,
		pgx.Identifier{t.Outbox}.Sanitize(), pgx.Identifier{t.DeadLetters}.Sanitize(), pgx.Identifier{t.Attempts}.Sanitize(),
		pgx.Identifier{t.Outbox + "_deliveries"}.Sanitize()))
	return err
}

// Teardown closes the relay's pool.
func (o *Outbox) Teardown(context.Context) error {
	if o.pool != nil {
		o.pool.Close()
	}
	return nil
}

// funcSink is a sink.Sink that hands every payload to a Sink and reports
// each message as delivered.
type funcSink struct {
	fn     Sink
	closed atomic.Bool
}

var _ sink.Sink = (*funcSink)(nil)

func (f *funcSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if f.closed.Load() {
		return sinkkit.Fill(len(msgs), outbox.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return sinkkit.Fill(len(msgs), fmt.Errorf("bench sink: %w: %w", err, outbox.ErrNotAttempted))
	}
	payloads := make([][]byte, len(msgs))
	for i := range msgs {
		payloads[i] = msgs[i].Payload
	}
	f.fn(payloads)
	return make([]error, len(msgs))
}

func (f *funcSink) Close(context.Context) error {
	f.closed.Store(true)
	return nil
}

// errTimeout is returned when a phase does not finish in time.
var errTimeout = errors.New("timed out")

// pollUntil calls f every interval until it returns true, an error, or
// the timeout passes.
func pollUntil(ctx context.Context, interval, timeout time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := f()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return errTimeout
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
