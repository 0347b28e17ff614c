package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

var (
	_ store.Snapshotter = (*Store)(nil)
	_ store.GaugeLeaser = (*Store)(nil)
)

// snapshotSQL reads the cheap figures in one statement: each count is a
// range of the (status, available_at, id) index, so the PROCESSED rows are
// never read, and the ages use one reading of the clock.
const snapshotSQL = `
SELECT UTC_TIMESTAMP(6),
    (SELECT COUNT(*) FROM {t} WHERE status = 'PENDING'),
    (SELECT COUNT(*) FROM {t} WHERE status = 'PROCESSING'),
    (SELECT COUNT(*) FROM {t} WHERE status = 'BLOCKED'),
    (SELECT COUNT(*) FROM {t} WHERE status = 'FAILED'),
    (SELECT TIMESTAMPDIFF(MICROSECOND, MIN(available_at), UTC_TIMESTAMP(6)) FROM {t}
      WHERE status = 'PENDING' AND available_at <= UTC_TIMESTAMP(6)),
    (SELECT COUNT(*) FROM {dl} WHERE requeued_at IS NULL)`

const finalCountsSQL = `SELECT status, COUNT(*) FROM {t} WHERE status IN ('PROCESSED', 'EXPIRED', 'SKIPPED') GROUP BY status`

// oldestPendingSQL visits every PENDING row for its created_at; ? is the
// snapshot's clock.
const oldestPendingSQL = `SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), ?) FROM {t} WHERE status = 'PENDING'`

// Snapshot implements store.Snapshotter: every figure is read in one
// read-only REPEATABLE READ transaction (one InnoDB read view).
func (s *Store) Snapshot(ctx context.Context, req store.SnapshotRequest) (store.Snapshot, error) {
	return s.snapshot(ctx, s.db, req)
}

// txBeginner is what both *sql.DB and *sql.Conn offer.
type txBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

func (s *Store) snapshot(ctx context.Context, db txBeginner, req store.SnapshotRequest) (store.Snapshot, error) {
	snap := backend.NewSnapshot(req)
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return snap, s.wrap("snapshot", err)
	}
	defer tx.Rollback()
	var now nullTime
	var pending, processing, blocked, failed int64
	var oldest, oldestDue sql.NullInt64
	if err := tx.QueryRowContext(ctx, render(s.t, snapshotSQL)).Scan(&now, &pending, &processing, &blocked, &failed,
		&oldestDue, &snap.DeadLetters); err != nil {
		return snap, s.wrap("snapshot", err)
	}
	snap.DBTime = now.Time
	snap.Counts[outbox.StatusPending], snap.Counts[outbox.StatusProcessing] = pending, processing
	snap.Counts[outbox.StatusBlocked], snap.Counts[outbox.StatusFailed] = blocked, failed
	snap.OldestDuePendingAge = max(time.Duration(oldestDue.Int64)*time.Microsecond, 0)
	if req.Full {
		if err := tx.QueryRowContext(ctx, render(s.t, oldestPendingSQL), formatTime(now.Time)).Scan(&oldest); err != nil {
			return snap, s.wrap("snapshot: oldest pending", err)
		}
		snap.OldestPendingAge = max(time.Duration(oldest.Int64)*time.Microsecond, 0)
		rows, err := tx.QueryContext(ctx, render(s.t, finalCountsSQL))
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
		rows, err := tx.QueryContext(ctx, s.q.blockedAg)
		if err != nil {
			return snap, s.wrap("snapshot: blocked aggregates", err)
		}
		err = backend.ScanBlockedAggregates(rows, req.BlockedListLimit(), &snap, func(b *store.BlockedAggregate, total *int64) error {
			return rows.Scan(&b.AggregateType, &b.AggregateID, &b.FailedEventID, &b.Waiting, total)
		})
		rows.Close()
		if err != nil {
			return snap, s.wrap("snapshot: blocked aggregates", err)
		}
	}
	return snap, tx.Commit()
}

// TryGaugeLease implements store.GaugeLeaser with GET_LOCK on a connection
// taken out of the pool for as long as the lease is held: the lock, and
// the lease, end with that session. The lock is named
// "outbox-gauges:" + SHA1("<database>.<table>"), since lock names are
// server-wide and at most 64 characters.
func (s *Store) TryGaugeLease(ctx context.Context) (store.GaugeLease, bool, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, false, s.wrap("gauge lease: connect", err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+gaugeLockName+", 0)", s.t.Outbox).Scan(&got); err != nil {
		conn.Close()
		return nil, false, s.wrap("gauge lease", err)
	}
	if got.Int64 != 1 {
		conn.Close()
		return nil, false, nil
	}
	return &gaugeLease{s: s, conn: conn}, true, nil
}

type gaugeLease struct {
	s    *Store
	conn *sql.Conn
}

func (l *gaugeLease) Snapshot(ctx context.Context, req store.SnapshotRequest) (store.Snapshot, error) {
	return l.s.snapshot(ctx, l.conn, req)
}

// gaugeLockName is the SQL of the lock's name (? is the table).
const gaugeLockName = "CONCAT('outbox-gauges:', SHA1(CONCAT(DATABASE(), '.', ?)))"

// Release gives the lock back (the server frees a closed session's locks
// only a moment later) and discards the connection rather than pooling it.
func (l *gaugeLease) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = l.conn.ExecContext(ctx, "DO RELEASE_LOCK("+gaugeLockName+")", l.s.t.Outbox)
	_ = l.conn.Raw(func(any) error { return errDiscard })
	l.conn.Close()
}

// errDiscard tells database/sql to close a connection instead of pooling it.
var errDiscard = fmt.Errorf("gauge lease released: %w", driver.ErrBadConn)
