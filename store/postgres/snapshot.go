package postgres

import (
	"context"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/snapshotsql"
)

var (
	_ store.GaugeLeaser = (*Store)(nil)
)

// snapshotStatements are the statements of a snapshot.
func snapshotStatements(stmt func(name string) string) snapshotsql.Statements {
	return snapshotsql.Statements{
		Figures:           stmt("snapshot.figures"),
		OldestPending:     stmt("snapshot.oldest_pending"),
		OldestPendingArgs: func(time.Time) []any { return nil },
		FinalCounts:       stmt("snapshot.final_counts"),
		BlockedAggregates: stmt("admin.blocked_aggregates"),
	}
}

// Snapshot implements store.Store: every figure is read in one
// read-only REPEATABLE READ transaction.
func (s *Store) Snapshot(ctx context.Context, req store.SnapshotRequest) (store.Snapshot, error) {
	return s.snapshot(ctx, s.pool, req)
}

// beginner is what both a pool and a single connection offer.
type beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

func (s *Store) snapshot(ctx context.Context, db beginner, req store.SnapshotRequest) (store.Snapshot, error) {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return backend.NewSnapshot(req), s.wrap("snapshot", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	return snapshotsql.Read(ctx, snapshotTx{tx}, sqlDialect, &s.q.snapshot, req, s.wrap)
}

// snapshotTx is a pgx transaction as snapshotsql reads in it.
type snapshotTx struct{ tx pgx.Tx }

func (t snapshotTx) QueryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return t.tx.QueryRow(ctx, query, args...).Scan(dest...)
}

func (t snapshotTx) Query(ctx context.Context, query string, args ...any) (snapshotsql.Rows, error) {
	return t.tx.Query(ctx, query, args...)
}

// TryGaugeLease implements store.GaugeLeaser with a session advisory
// lock. The lock is tried on a pooled connection; when it is taken, that
// connection leaves the pool (it is the lease's own from then on), so that
// the lease ends when its session does: when the process exits or the
// connection breaks. Behind a pooler in transaction mode (PgBouncer) a
// session lock is not held reliably; point the relays at the server.
func (s *Store) TryGaugeLease(ctx context.Context) (store.GaugeLease, bool, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, s.wrap("gauge lease", err)
	}
	var ok bool
	if err := pc.QueryRow(ctx, gaugeLockSQL, gaugeLockID(s.t.Outbox)).Scan(&ok); err != nil {
		pc.Release()
		return nil, false, s.wrap("gauge lease", err)
	}
	if !ok {
		pc.Release()
		return nil, false, nil
	}
	return &gaugeLease{s: s, conn: pc.Hijack()}, true, nil
}

type gaugeLease struct {
	s    *Store
	conn *pgx.Conn
}

func (l *gaugeLease) Snapshot(ctx context.Context, req store.SnapshotRequest) (store.Snapshot, error) {
	return l.s.snapshot(ctx, l.conn, req)
}

// Release gives the lock back (the server frees a closed session's locks
// only once its backend has exited, a moment later) and closes the
// session.
func (l *gaugeLease) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = l.conn.Exec(ctx, gaugeUnlockSQL, gaugeLockID(l.s.t.Outbox))
	l.conn.Close(ctx)
}

// gaugeLockID is the advisory lock of one outbox's gauge lease: FNV-1a of
// a salted name, in the single-bigint key space (the enqueue locks use the
// two-int one, and the migration lock another salt).
func gaugeLockID(table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("outbox-gauges:" + table))
	return int64(h.Sum64() >> 1)
}
