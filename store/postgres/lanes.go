package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

// BalanceLanes implements store.Store.
func (s *Store) BalanceLanes(ctx context.Context, relayID string, lease time.Duration) error {
	return s.wrap("balance lanes", retrySerialization(ctx, func() error { return s.claimer.Balance(ctx, relayID, lease) }))
}

// ReleaseLanes implements store.Store.
func (s *Store) ReleaseLanes(ctx context.Context, relayID string) error {
	return s.wrap("release lanes", s.claimer.Release(ctx, relayID))
}

// HeldLanes implements store.Store.
func (s *Store) HeldLanes(relayID string) map[int]int64 { return s.claimer.Held(relayID) }

// leaseTx runs the lane statements in one transaction. It never yields:
// PostgreSQL's writers do not queue for one lock.
func (s *Store) leaseTx(ctx context.Context, _ bool, f func(q lanes.Querier) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return f(pgxQuerier{tx}) })
}

// pgxQuerier is a pgx transaction as the lanes' statements run in it.
type pgxQuerier struct{ tx pgx.Tx }

func (q pgxQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (q pgxQuerier) Query(ctx context.Context, query string, args ...any) (lanes.Rows, error) {
	return q.tx.Query(ctx, query, args...)
}
