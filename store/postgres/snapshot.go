package postgres

import (
	"context"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/snapshotsql"
)

var (
	_ store.GaugeLeaser = (*Store)(nil)
)

// snapshotSQL reads the cheap figures in one statement, never the
// delivered rows: the unfinished rows of hold 0 from each lane's stored
// cursor on (the lane index) and those of hold 1 (the due index) are the
// PENDING ones, PROCESSING when a claim holds them (busy); BLOCKED and
// FAILED rows have hold 2 (the held index).
const snapshotSQL = `
WITH busy AS MATERIALIZED (
    SELECT DISTINCT unnest(ids) AS id FROM "{{.Outbox}}_claims"
),
u AS MATERIALIZED (
    SELECT x.id, x.status, x.available_at FROM "{{.Outbox}}_lanes" l CROSS JOIN LATERAL (
        SELECT o.id, o.status, o.available_at FROM "{{.Outbox}}" o
        WHERE o.lane = l.lane AND o.id >= l.next_id AND o.hold = 0 AND o.status IN ('PENDING', 'PROCESSING')) x
    UNION ALL
    SELECT id, status, available_at FROM "{{.Outbox}}" WHERE hold = 1 AND status IN ('PENDING', 'PROCESSING')
)
SELECT now(),
    (SELECT count(*) FROM u WHERE status = 'PENDING' AND id NOT IN (SELECT id FROM busy)),
    (SELECT count(*) FROM u WHERE status = 'PROCESSING' OR id IN (SELECT id FROM busy)),
    (SELECT count(*) FROM "{{.Outbox}}" WHERE hold = 2 AND status = 'BLOCKED'),
    (SELECT count(*) FROM "{{.Outbox}}" WHERE hold = 2 AND status = 'FAILED'),
    COALESCE((SELECT EXTRACT(EPOCH FROM now() - min(available_at)) FROM u
              WHERE status = 'PENDING' AND available_at <= now() AND id NOT IN (SELECT id FROM busy)), 0)::float8,
    (SELECT count(*) FROM "{{.DeadLetters}}" WHERE requeued_at IS NULL)`

// finalCountsSQL counts the final statuses: a scan of the whole table.
const finalCountsSQL = `SELECT status, count(*) FROM "{{.Outbox}}" WHERE status IN ('PROCESSED', 'EXPIRED', 'SKIPPED') GROUP BY status`

// oldestPendingSQL visits every PENDING row for its created_at.
const oldestPendingSQL = `SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 FROM "{{.Outbox}}" WHERE status = 'PENDING'`

// snapshotDialect is the PostgreSQL part of a snapshot: pgx scans the
// clock as a time.Time, the ages are float seconds (0 for none) and the
// event ids are uuid bytes.
func snapshotDialect(t store.Tables, blockedAggregates string) snapshotsql.Dialect {
	return snapshotsql.Dialect{
		Figures:           sqltext.MustRender(snapshotSQL, t),
		OldestPending:     sqltext.MustRender(oldestPendingSQL, t),
		OldestPendingArgs: func(time.Time) []any { return nil },
		FinalCounts:       sqltext.MustRender(finalCountsSQL, t),
		BlockedAggregates: blockedAggregates,
		Clock: func() (any, func() time.Time) {
			var now time.Time
			return &now, func() time.Time { return now }
		},
		Age: func() (any, func() time.Duration) {
			var seconds float64
			return &seconds, func() time.Duration { return time.Duration(seconds * float64(time.Second)) }
		},
		EventID: func(id *outbox.EventID) (any, func()) {
			var raw [16]byte
			return &raw, func() { *id = outbox.EventID(raw) }
		},
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
	return snapshotsql.Read(ctx, snapshotTx{tx}, &s.q.snapshot, req, s.wrap)
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
	if err := pc.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", gaugeLockID(s.t.Outbox)).Scan(&ok); err != nil {
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
	_, _ = l.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", gaugeLockID(l.s.t.Outbox))
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
