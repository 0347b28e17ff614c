package postgres_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// newTable returns a migrated store on a fresh table and its name.
func newTable(t *testing.T, cfg postgres.Config) (*postgres.Store, string) {
	t.Helper()
	pool := newPool(t)
	if cfg.Table == "" {
		cfg.Table = storetest.TableName("pgn")
	}
	s, err := postgres.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MigrateUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.MigrateDown(context.Background())
		if _, err := pool.Exec(context.Background(), pgtest.DropTables(cfg.Table)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return s, cfg.Table
}

func enqueueWith(t *testing.T, s *postgres.Store, events ...outbox.Event) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := s.Enqueue(ctx, tx, events...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func event(agg string) outbox.Event {
	return outbox.Event{AggregateType: "payment", AggregateID: agg, EventType: "ApprovalRequested", Payload: []byte(`{}`)}
}

// wakeWait bounds the waits of these tests, a bound for a hang, with room
// for -race on a loaded machine.
const wakeWait = 2 * time.Minute

// startRelay runs a relay with a poll interval of an hour: anything
// delivered within the test's deadline (wakeWait) arrived through a
// wake-up.
func startRelay(t *testing.T, s *postgres.Store, noListen bool) *relaytest.Recorder {
	t.Helper()
	rec := &relaytest.Recorder{Name: "sink"}
	r, err := relay.New(relay.Config{Store: s, Sink: rec, PollInterval: time.Hour, NoListen: noListen,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = r.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	// Wait for the first (empty) claim: from then on the relay sleeps for
	// its poll interval unless woken.
	deadline := time.Now().Add(wakeWait)
	for r.Stats().Claims == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the relay never claimed")
		}
		tick := time.NewTimer(time.Millisecond)
		<-tick.C
	}
	return rec
}

func waitDelivered(t *testing.T, rec *relaytest.Recorder, n int, how string) {
	t.Helper()
	deadline := time.After(wakeWait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for len(rec.Deliveries()) < n {
		select {
		case <-deadline:
			t.Fatalf("%d of %d events delivered; the wake-up (%s) did not happen (the poll interval is an hour)", len(rec.Deliveries()), n, how)
		case <-tick.C:
		}
	}
}

func TestListenWakesRelayAcrossProcesses(t *testing.T) {
	relayStore, table := newTable(t, postgres.Config{})
	rec := startRelay(t, relayStore, false)
	// A second Store stands for another process: no in-process nudge.
	producer, err := postgres.New(newPool(t), postgres.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	// Let the first (empty) claim and the LISTEN happen, then enqueue.
	waitListening(t, relayStore, table)
	enqueueWith(t, producer, event("a"))
	waitDelivered(t, rec, 1, "LISTEN/NOTIFY")
	// Two enqueues inside one debounce window: the second rides the
	// trailing NOTIFY, sent outside its transaction.
	enqueueWith(t, producer, event("b"))
	enqueueWith(t, producer, event("c"))
	waitDelivered(t, rec, 3, "trailing NOTIFY")
}

func TestInProcessNudge(t *testing.T) {
	s, _ := newTable(t, postgres.Config{NoNotify: true})
	rec := startRelay(t, s, true)
	enqueueWith(t, s, event("hybrid"))
	waitDelivered(t, rec, 1, "in-process nudge")
}

func TestPollingAloneDelivers(t *testing.T) {
	s, table := newTable(t, postgres.Config{NoNotify: true})
	producer, err := postgres.New(newPool(t), postgres.Config{Table: table, NoNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := &relaytest.Recorder{Name: "sink"}
	r, err := relay.New(relay.Config{Store: s, Sink: rec, PollInterval: 50 * time.Millisecond, NoListen: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	enqueueWith(t, producer, event("poll"))
	waitDelivered(t, rec, 1, "none: polling")
}

func TestNotifyDebounced(t *testing.T) {
	s, table := newTable(t, postgres.Config{NotifyDebounce: time.Hour})
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, s.Pool().Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{table}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		enqueueWith(t, s, event("burst"))
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil { // collects pending notifications
		t.Fatal(err)
	}
	got := 0
	for {
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		got++
	}
	if got != 1 {
		t.Fatalf("20 enqueues within one debounce window sent %d NOTIFYs in producer transactions, want 1", got)
	}
}

// waitListening waits until the relay's LISTEN connection is registered.
func waitListening(t *testing.T, s *postgres.Store, channel string) {
	t.Helper()
	deadline := time.Now().Add(wakeWait)
	for {
		var n int
		err := s.Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'listen %' AND query ILIKE '%' || $1 || '%'`, channel).Scan(&n)
		if err == nil && n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay never started listening on %s (err %v)", channel, err)
		}
		tick := time.NewTimer(10 * time.Millisecond)
		<-tick.C
	}
}
