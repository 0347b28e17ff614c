package benchkit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// producerTx runs one producer transaction: one business row and one event,
// then COMMIT. It returns when COMMIT has returned.
func producerTx(ctx context.Context, pool *pgxpool.Pool, sys System, ev Event, amount int64) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO bench_payments (payment_id, amount) VALUES ($1, $2)`, ev.Aggregate, amount); err != nil {
		return fmt.Errorf("insert the business row: %w", err)
	}
	if err := sys.Produce(ctx, tx, ev); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// produceFor runs n producers as fast as they go for d and returns the
// number of committed transactions and the first error.
func produceFor(ctx context.Context, pool *pgxpool.Pool, sys System, n, aggregates int, d time.Duration, seq *atomic.Int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		committed atomic.Int64
		wg        sync.WaitGroup
		errOnce   sync.Once
		firstErr  error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				k := seq.Add(1) - 1
				err := producerTx(ctx, pool, sys, NewEvent(k, aggregates), k)
				if err != nil {
					if ctx.Err() == nil {
						errOnce.Do(func() { firstErr = err; cancel() })
					}
					return
				}
				committed.Add(1)
			}
		}()
	}
	wg.Wait()
	return committed.Load(), firstErr
}
