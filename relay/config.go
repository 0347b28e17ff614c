package relay

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/sink"
)

// FailurePolicy says what a FAILED event does to the later events of its
// aggregate.
type FailurePolicy int

const (
	// BlockAggregate (the default) holds the later events of the
	// aggregate as BLOCKED until an operator requeues or skips the FAILED
	// one, so that order is never broken.
	BlockAggregate FailurePolicy = iota
	// ContinueAggregate lets the later events go on; the FAILED one stays
	// in the dead-letter table.
	ContinueAggregate
)

// ParseFailurePolicy accepts "block" or "continue".
func ParseFailurePolicy(s string) (FailurePolicy, error) {
	switch s {
	case "block", "":
		return BlockAggregate, nil
	case "continue":
		return ContinueAggregate, nil
	}
	return 0, fmt.Errorf("%w: unknown failure policy %q: use block or continue", outbox.ErrInvalidConfig, s)
}

func (p FailurePolicy) String() string {
	if p == ContinueAggregate {
		return "continue"
	}
	return "block"
}

// FailedEvent is what the alarm callback receives.
type FailedEvent struct {
	EventID       outbox.EventID
	AggregateType string
	AggregateID   string
	EventType     string
	Attempts      int
	Reason        string
	// Blocking is true when the aggregate's later events now wait for an operator.
	Blocking bool
}

// Config configures a Relay. Zero values mean the documented defaults.
type Config struct {
	Store Store     // required: a store.Store, or anything with the methods of Store
	Sink  sink.Sink // required

	// RelayID names this relay in the audit trail and logs. Default
	// "<hostname>-<pid>-<random>".
	RelayID string
	// BatchSize is the most events claimed at once. Default 500.
	BatchSize int
	// PollInterval is the wait between claims when nothing was due.
	// Default 1s. Wake-ups (Notify) cut it short.
	PollInterval time.Duration
	// Linger is the least wait between a claim that took some events but
	// not a full batch and the next claim. Wake-ups that arrive meanwhile
	// are folded into that next claim, so that a steady trickle of events
	// is claimed in small batches rather than one claim per event, which
	// would take database time from the producers. Default 5ms; a negative
	// value claims again at once. A full batch is followed at once.
	Linger time.Duration
	// Lease is how long a claim is exclusive. It must exceed the time to
	// publish and mark a batch by a wide margin. The claim itself may take
	// at most half of it (a claim that committed after its lease ended
	// would hand out events another relay may take), so a lease of a few
	// seconds on an overloaded database can leave every claim timing out.
	// Default 2m.
	Lease time.Duration
	// MaxRetries is how many failed attempts are retried: the event ends
	// FAILED when retry_count would exceed it. Default 5 (the source's
	// "retry_count > 5 -> FAILED"); set NoRetries for none.
	MaxRetries int
	// NoRetries fails an event at its first failure.
	NoRetries bool
	// BackoffMin and BackoffMax bound the exponential backoff between
	// attempts. Defaults 1s and 5m.
	BackoffMin, BackoffMax time.Duration
	// SweepInterval is how often the reaper runs. Default 5s.
	SweepInterval time.Duration
	// Retention moves finished events (PROCESSED, EXPIRED, SKIPPED) and
	// their audit rows out of the hot table into the history this long
	// after they finished (docs/HISTORY.md); nothing is deleted. 0 leaves
	// them in the hot table. It is also the window of the idempotent
	// enqueue: an event id stays taken while its event is in the hot table.
	// On a table that outbox adopted, it moves only the events that
	// finished after the adoption, unless PurgeAdopted.
	Retention time.Duration
	// PurgeAdopted lets Retention move, on an adopted table, the rows
	// that had finished before the adoption too (the team's history).
	PurgeAdopted bool
	// HistoryKeepDays, when above 0, drops the months of history that
	// ended more than this many days ago, whole (docs/HISTORY.md). 0 keeps
	// the history forever.
	HistoryKeepDays int
	// OnFailure chooses what a FAILED event does to its aggregate.
	OnFailure FailurePolicy
	// MaxBatchesInFlight is how many claimed batches may be on their way
	// at once: while one is published, the next is claimed and the one
	// before is being recorded. Default 2; 1 turns the pipeline off. Only
	// stores that declare Features.ClaimBehindOwn pipeline; others use 1.
	MaxBatchesInFlight int
	// StopTimeout bounds how long a stopping relay keeps publishing the
	// batch in flight before it releases the rest. Default 10s.
	StopTimeout time.Duration

	// Encryption opens sealed payloads (docs/ENCRYPTION.md) before they
	// reach the sink, which receives the plaintext; the store keeps the
	// sealed bytes in every table. Nil: a sealed payload is given back
	// unsent, for a relay that has the key. A payload whose data key was
	// shredded ends FAILED, never sent. A payload a producer wrote in plain
	// is sealed in its row (under its aggregate's key) when the relay
	// claims it, before it is sent.
	Encryption *encrypt.Keyring
	// Keys is where Encryption reads the data keys; default the Store
	// (every store.Store keeps them in <table>_keys).
	Keys encrypt.KeyStore

	// Breaker configures the circuit breaker of each route (see
	// BreakerConfig). The store keeps its state (Store.Routes and
	// Store.ChangeRoute).
	Breaker BreakerConfig
	// StrictFIFO turns earliest-deadline-first off: every claim takes the
	// oldest due events in (available_at, id) order, whatever their
	// deadlines. By default, part of each claim goes to the aggregates
	// holding the due events with the nearest deadlines (see FIFOShare).
	StrictFIFO bool
	// FIFOShare is the part of each claim (above 0, at most 1) that goes
	// to the oldest due events in plain id order, whatever deadlines
	// other events have: events without a deadline progress at no less
	// than this share of the relay's claims. Default 0.5
	// (store.DefaultFIFOShare); 1 is strict FIFO.
	FIFOShare float64

	// NoListen turns off database wake-ups (PostgreSQL LISTEN/NOTIFY): the
	// relay then finds new events by polling alone.
	NoListen bool

	// Logger receives the relay's logs. Default slog.Default().
	Logger *slog.Logger
	// OnFailed is called (the alarm) after an event ends FAILED. It runs
	// on the relay's goroutine: keep it short.
	OnFailed func(context.Context, FailedEvent)

	// Observer receives claims, publishes, outcomes, lease losses and
	// store errors, for metrics (see the metrics subpackage). nil: none.
	Observer Observer
	// Tracer wraps every sink call, e.g. in an OpenTelemetry span (see the
	// tracing subpackage). nil: none.
	Tracer PublishTracer
}

// Defaults.
const (
	DefaultBatchSize     = 500
	DefaultPollInterval  = time.Second
	DefaultLease         = 2 * time.Minute
	DefaultLinger        = 5 * time.Millisecond
	DefaultMaxRetries    = 5
	DefaultBackoffMin    = time.Second
	DefaultBackoffMax    = 5 * time.Minute
	DefaultSweepInterval = 5 * time.Second
	DefaultStopTimeout   = 10 * time.Second
	// DefaultMaxBatchesInFlight: claim the next batch while one is published.
	DefaultMaxBatchesInFlight = 2
)

// NewRelayID returns a fresh relay id of the default form
// "<hostname>-<pid>-<random>", for callers that need the id before the
// relay exists (e.g. to label metrics).
func NewRelayID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "relay"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
}

func (c Config) withDefaults() Config {
	if c.RelayID == "" {
		c.RelayID = NewRelayID()
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.MaxRetries == 0 && !c.NoRetries {
		c.MaxRetries = DefaultMaxRetries
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(DefaultBackoffMax, c.BackoffMin)
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.MaxBatchesInFlight == 0 {
		c.MaxBatchesInFlight = DefaultMaxBatchesInFlight
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Breaker = c.Breaker.withDefaults()
	return c
}

func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{outbox.ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Store == nil:
		return bad("relay needs a Store")
	case c.Sink == nil:
		return bad("relay needs a Sink")
	case c.Encryption != nil && c.keyStore() == nil:
		return bad("relay has Encryption but no key store: set Config.Keys, or use a store that keeps data keys")
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return bad("batch size %d is out of range: use 1 to 10000", c.BatchSize)
	case c.PollInterval < time.Millisecond:
		return bad("poll interval %s is too short: use at least 1ms", c.PollInterval)
	case c.Lease < 100*time.Millisecond:
		return bad("lease %s is too short: use at least 100ms (the default is %s)", c.Lease, DefaultLease)
	case c.MaxRetries < 0:
		return bad("max retries %d is negative", c.MaxRetries)
	case c.BackoffMin < 0 || c.BackoffMax < c.BackoffMin:
		return bad("backoff bounds min %s, max %s: need 0 <= min <= max", c.BackoffMin, c.BackoffMax)
	case c.SweepInterval < 10*time.Millisecond:
		return bad("sweep interval %s is too short: use at least 10ms", c.SweepInterval)
	case c.Retention < 0:
		return bad("retention %s is negative", c.Retention)
	case c.HistoryKeepDays < 0:
		return bad("history retention of %d days is negative (0 keeps the history forever)", c.HistoryKeepDays)
	case c.MaxBatchesInFlight < 1 || c.MaxBatchesInFlight > 16:
		return bad("max batches in flight %d is out of range: use 1 to 16", c.MaxBatchesInFlight)
	case c.StopTimeout < 0:
		return bad("stop timeout %s is negative", c.StopTimeout)
	case c.FIFOShare < 0 || c.FIFOShare > 1 || c.FIFOShare != c.FIFOShare:
		return bad("FIFO share %v is out of range: use a fraction above 0 and at most 1, e.g. 0.5", c.FIFOShare)
	case c.OnFailure != BlockAggregate && c.OnFailure != ContinueAggregate:
		return bad("unknown failure policy %d", c.OnFailure)
	}
	return c.Breaker.validate()
}
