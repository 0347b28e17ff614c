package benchkit

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// System is one transactional-outbox implementation under test: how it
// writes an event in a producer's transaction and how its relay delivers
// committed events. Methods other than the sink are called from one
// goroutine at a time, except Produce, which producers call concurrently.
type System interface {
	// Name labels the system in the report, e.g. "outbox" or "river".
	Name() string
	// Setup creates the system's tables in env.Schema, which exists, is
	// empty and is the search_path of every pool env hands out.
	Setup(ctx context.Context, env Env) error
	// Produce writes ev in the caller's transaction tx, without committing.
	Produce(ctx context.Context, tx pgx.Tx, ev Event) error
	// Load writes events as fast as the system allows (its own bulk insert)
	// and returns once they are committed. It is not timed.
	Load(ctx context.Context, events []Event) error
	// StartRelay starts delivering committed events to sink and returns at
	// once. stop stops the relay, waits for it and returns its error.
	StartRelay(ctx context.Context, sink Sink) (stop func() error, err error)
	// Pending counts the events not yet delivered and recorded as done.
	Pending(ctx context.Context) (int64, error)
	// Reset deletes every event, leaving empty tables.
	Reset(ctx context.Context) error
	// Teardown releases what Setup opened. The runner drops the schema.
	Teardown(ctx context.Context) error
}

// Env is what a system gets to set itself up.
type Env struct {
	// Schema holds the system's tables; it is the search_path of the pools.
	Schema string
	// NewPool opens a pool on the benchmark database with Schema as its
	// search_path. The system closes the pools it opens.
	NewPool func(ctx context.Context, maxConns int) (*pgxpool.Pool, error)
	// NewPoolWith is NewPool with configure applied to the pool's config
	// before it connects.
	NewPoolWith func(ctx context.Context, maxConns int, configure func(*pgxpool.Config)) (*pgxpool.Pool, error)
	// DSN is the benchmark database with Schema as its search_path.
	DSN string
	// Batch is the claim or fetch batch size asked for on the command line;
	// 0 means the system's own benchmark setting.
	Batch int
	// Logger receives the system's own logs (warnings and errors only).
	Logger *slog.Logger
}

// Event is one event as producers write it: an aggregate (the ordering key,
// for systems that have one) and a JSON payload of about 100 bytes that
// starts with {"seq":N, so that a sink can find the event's sequence number.
type Event struct {
	Aggregate string
	Payload   []byte
}

// Sink receives the payloads of delivered events. Systems call it from
// their consumer goroutines, possibly concurrently; it does not keep the
// payloads after it returns.
type Sink func(payloads [][]byte)
