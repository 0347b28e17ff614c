package postgres

import (
	"context"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

var (
	_ store.Snapshotter = (*Store)(nil)
	_ store.GaugeLeaser = (*Store)(nil)
)

// snapshotSQL reads the cheap figures in one statement. Every count names
// one unfinished status, so that it reads that status's partial index and
// never the PROCESSED rows; the oldest due PENDING event is the first entry
// of the claim's (available_at, id) index.
const snapshotSQL = `
SELECT now(),
    (SELECT count(*) FROM {t} WHERE status = 'PENDING'),
    (SELECT count(*) FROM {t} WHERE status = 'PROCESSING'),
    (SELECT count(*) FROM {t} WHERE status = 'BLOCKED'),
    (SELECT count(*) FROM {t} WHERE status = 'FAILED'),
    COALESCE((SELECT EXTRACT(EPOCH FROM now() - min(available_at)) FROM {t}
              WHERE status = 'PENDING' AND available_at <= now()), 0)::float8,
    (SELECT count(*) FROM {dl} WHERE requeued_at IS NULL)`

// finalCountsSQL counts the final statuses: a scan of the whole table.
const finalCountsSQL = `SELECT status, count(*) FROM {t} WHERE status IN ('PROCESSED', 'EXPIRED', 'SKIPPED') GROUP BY status`

// oldestPendingSQL visits every PENDING row for its created_at.
const oldestPendingSQL = `SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 FROM {t} WHERE status = 'PENDING'`

// Snapshot implements store.Snapshotter: every figure is read in one
// read-only REPEATABLE READ transaction.
func (s *Store) Snapshot(ctx context.Context, req store.SnapshotRequest) (store.Snapshot, error) {
	return s.snapshot(ctx, s.pool, req)
}

// beginner is what both a pool and a single connection offer.
type beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

func (s *Store) snapshot(ctx context.Context, db beginner, req store.SnapshotRequest) (store.Snapshot, error) {
	snap := backend.NewSnapshot(req)
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return snap, s.wrap("snapshot", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var oldest, oldestDue float64
	var pending, processing, blocked, failed int64
	if err := tx.QueryRow(ctx, render(s.t, snapshotSQL)).Scan(&snap.DBTime, &pending, &processing, &blocked, &failed,
		&oldestDue, &snap.DeadLetters); err != nil {
		return snap, s.wrap("snapshot", err)
	}
	snap.Counts[outbox.StatusPending], snap.Counts[outbox.StatusProcessing] = pending, processing
	snap.Counts[outbox.StatusBlocked], snap.Counts[outbox.StatusFailed] = blocked, failed
	snap.OldestDuePendingAge = time.Duration(oldestDue * float64(time.Second))
	if req.Full {
		if err := tx.QueryRow(ctx, render(s.t, oldestPendingSQL)).Scan(&oldest); err != nil {
			return snap, s.wrap("snapshot: oldest pending", err)
		}
		snap.OldestPendingAge = time.Duration(oldest * float64(time.Second))
		rows, err := tx.Query(ctx, render(s.t, finalCountsSQL))
		if err != nil {
			return snap, s.wrap("snapshot: final counts", err)
		}
		err = backend.ScanStatusCounts(rows, snap.Counts)
		rows.Close()
		if err != nil {
			return snap, s.wrap("snapshot: final counts", err)
		}
	}
	if req.FailedBlocks {
		rows, err := tx.Query(ctx, s.q.blockedAg)
		if err != nil {
			return snap, s.wrap("snapshot: blocked aggregates", err)
		}
		err = backend.ScanBlockedAggregates(rows, req.BlockedListLimit(), &snap, func(b *store.BlockedAggregate, total *int64) error {
			var id [16]byte
			err := rows.Scan(&b.AggregateType, &b.AggregateID, &id, &b.Waiting, total)
			b.FailedEventID = outbox.EventID(id)
			return err
		})
		rows.Close()
		if err != nil {
			return snap, s.wrap("snapshot: blocked aggregates", err)
		}
	}
	return snap, nil
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
