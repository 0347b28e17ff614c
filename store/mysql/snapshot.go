package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/snapshotsql"
)

var (
	_ store.GaugeLeaser = (*Store)(nil)
)

// snapshotSQL reads the cheap figures in one statement: each count is a
// range of the (status, available_at, id) index, so the PROCESSED rows are
// never read, and the ages use one reading of the clock. A PENDING row that
// a claim holds (busy, migration 00007) counts as PROCESSING, and the due
// age is that of the oldest due row no claim holds.
const snapshotSQL = `
SELECT UTC_TIMESTAMP(6),
    (SELECT COUNT(*) FROM ` + "`{{.Outbox}}`" + ` WHERE status = 'PENDING') - (` + busyPendingSQL + `),
    (SELECT COUNT(*) FROM ` + "`{{.Outbox}}`" + ` WHERE status = 'PROCESSING') + (` + busyPendingSQL + `),
    (SELECT COUNT(*) FROM ` + "`{{.Outbox}}`" + ` WHERE status = 'BLOCKED'),
    (SELECT COUNT(*) FROM ` + "`{{.Outbox}}`" + ` WHERE status = 'FAILED'),
    (SELECT TIMESTAMPDIFF(MICROSECOND, d.available_at, UTC_TIMESTAMP(6)) FROM (
        SELECT available_at FROM ` + "`{{.Outbox}}`" + " FORCE INDEX (`{{.Outbox}}_due_idx`)" + `
        WHERE status = 'PENDING' AND available_at <= UTC_TIMESTAMP(6) AND id NOT IN (` + busySQL + `)
        ORDER BY available_at, id LIMIT 1) d),
    (SELECT COUNT(*) FROM ` + "`{{.DeadLetters}}`" + ` WHERE requeued_at IS NULL)`

// busySQL lists the rows the claims in flight hold (queries.sql's busy),
// and busyPendingSQL counts those still PENDING.
const (
	busySQL = "SELECT j.id FROM `{{.Outbox}}_claims` bc, JSON_TABLE(bc.ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j"

	busyPendingSQL = "SELECT COUNT(DISTINCT o.id) FROM (" + busySQL + ") b JOIN `{{.Outbox}}` o ON o.id = b.id WHERE o.status = 'PENDING'"
)

const finalCountsSQL = "SELECT status, COUNT(*) FROM `{{.Outbox}}` WHERE status IN ('PROCESSED', 'EXPIRED', 'SKIPPED') GROUP BY status"

// oldestPendingSQL visits every PENDING row for its created_at; ? is the
// snapshot's clock.
const oldestPendingSQL = "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), ?) FROM `{{.Outbox}}` WHERE status = 'PENDING'"

// snapshotDialect is the MySQL part of a snapshot: the clock is DATETIME(6)
// in UTC, the ages are microseconds (NULL for none), and the event ids are
// text.
func snapshotDialect(t store.Tables, blockedAggregates string) snapshotsql.Dialect {
	return snapshotsql.Dialect{
		Figures:           sqltext.MustRender(snapshotSQL, t),
		OldestPending:     sqltext.MustRender(oldestPendingSQL, t),
		OldestPendingArgs: func(clock time.Time) []any { return []any{formatTime(clock)} },
		FinalCounts:       sqltext.MustRender(finalCountsSQL, t),
		BlockedAggregates: blockedAggregates,
		Clock: func() (any, func() time.Time) {
			var now nullTime
			return &now, func() time.Time { return now.Time }
		},
		Age: func() (any, func() time.Duration) {
			var micros sql.NullInt64
			return &micros, func() time.Duration { return max(time.Duration(micros.Int64)*time.Microsecond, 0) }
		},
		EventID: func(id *outbox.EventID) (any, func()) { return id, nil },
	}
}

// Snapshot implements store.Store: every figure is read in one
// read-only REPEATABLE READ transaction (one InnoDB read view).
func (s *Store) Snapshot(ctx context.Context, req store.SnapshotRequest) (store.Snapshot, error) {
	return s.snapshot(ctx, s.db, req)
}

// txBeginner is what both *sql.DB and *sql.Conn offer.
type txBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

func (s *Store) snapshot(ctx context.Context, db txBeginner, req store.SnapshotRequest) (store.Snapshot, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return backend.NewSnapshot(req), s.wrap("snapshot", err)
	}
	defer tx.Rollback()
	snap, err := snapshotsql.Read(ctx, snapshotTx{tx}, &s.q.snapshot, req, s.wrap)
	if err != nil {
		return snap, err
	}
	return snap, tx.Commit()
}

// snapshotTx is a database/sql transaction as snapshotsql reads in it.
type snapshotTx struct{ tx *sql.Tx }

func (t snapshotTx) QueryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return t.tx.QueryRowContext(ctx, query, args...).Scan(dest...)
}

func (t snapshotTx) Query(ctx context.Context, query string, args ...any) (snapshotsql.Rows, error) {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

// sqlRows are *sql.Rows whose Close error is left to Err.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

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
