package benchkit

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BareSQL is the floor the drain goal of docs/BENCHMARKS.md compares
// against (at least 50% of its rate): one table and one loop that claims
// and deletes a batch in one statement (FOR UPDATE SKIP LOCKED) and hands
// it to the sink. No lease, no retries, no ordering, no audit trail: an
// event is gone before the sink sees it, so it is not an outbox, only the
// fastest thing PostgreSQL does with this work.
type BareSQL struct {
	// Batch is the most rows claimed at once. Default Env.Batch, then 1000.
	Batch int
	// PollInterval is the wait after an empty claim. Default 20ms.
	PollInterval time.Duration

	pool *pgxpool.Pool
}

var _ System = (*BareSQL)(nil)

// Name implements System.
func (*BareSQL) Name() string { return "bare SQL loop" }

// Setup creates the queue table.
func (b *BareSQL) Setup(ctx context.Context, env Env) error {
	pool, err := env.NewPool(ctx, 4)
	if err != nil {
		return err
	}
	b.pool = pool
	if b.Batch == 0 {
		b.Batch = env.Batch
	}
	if b.Batch == 0 {
		b.Batch = 1000
	}
	if b.PollInterval == 0 {
		b.PollInterval = 20 * time.Millisecond
	}
	_, err = pool.Exec(ctx, `CREATE TABLE bare_queue (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		aggregate text NOT NULL,
		payload json NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now())`)
	return err
}

// Produce inserts one row in tx.
func (b *BareSQL) Produce(ctx context.Context, tx pgx.Tx, ev Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO bare_queue (aggregate, payload) VALUES ($1, $2)`, ev.Aggregate, string(ev.Payload))
	return err
}

// Load copies events in.
func (b *BareSQL) Load(ctx context.Context, events []Event) error {
	_, err := b.pool.CopyFrom(ctx, pgx.Identifier{"bare_queue"}, []string{"aggregate", "payload"},
		pgx.CopyFromSlice(len(events), func(i int) ([]any, error) {
			return []any{events[i].Aggregate, string(events[i].Payload)}, nil
		}))
	return err
}

// StartRelay runs the claim-and-delete loop.
func (b *BareSQL) StartRelay(ctx context.Context, sink Sink) (func() error, error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.loop(ctx, sink)
	}()
	return func() error {
		cancel()
		err := <-done
		if ctx.Err() != nil {
			return nil
		}
		return err
	}, nil
}

func (b *BareSQL) loop(ctx context.Context, sink Sink) error {
	const claim = `DELETE FROM bare_queue WHERE id IN (
		SELECT id FROM bare_queue ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING payload`
	payloads := make([][]byte, 0, b.Batch)
	for ctx.Err() == nil {
		payloads = payloads[:0]
		rows, err := b.pool.Query(ctx, claim, b.Batch)
		if err != nil {
			return err
		}
		for rows.Next() {
			var p []byte
			if err := rows.Scan(&p); err != nil {
				rows.Close()
				return err
			}
			payloads = append(payloads, p)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(payloads) > 0 {
			sink(payloads)
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(b.PollInterval):
		}
	}
	return nil
}

// Pending counts the rows left.
func (b *BareSQL) Pending(ctx context.Context) (int64, error) {
	var n int64
	err := b.pool.QueryRow(ctx, `SELECT count(*) FROM bare_queue`).Scan(&n)
	return n, err
}

// Reset empties the table.
func (b *BareSQL) Reset(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, `TRUNCATE bare_queue RESTART IDENTITY`)
	return err
}

// Teardown closes the pool.
func (b *BareSQL) Teardown(context.Context) error {
	if b.pool != nil {
		b.pool.Close()
	}
	return nil
}
