package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"

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
		OldestPendingArgs: func(clock time.Time) []any { return []any{formatTime(clock)} },
		FinalCounts:       stmt("snapshot.final_counts"),
		BlockedAggregates: stmt("admin.blocked_aggregates"),
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
	snap, err := snapshotsql.Read(ctx, snapshotTx{tx}, sqlDialect, &s.q.snapshot, req, s.wrap)
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
	if err := conn.QueryRowContext(ctx, gaugeLockSQL, s.t.Outbox).Scan(&got); err != nil {
		conn.Close()
		return nil, false, s.wrap("gauge lease", err)
	}
	if got.Int64 != 1 {
		conn.Close()
		return nil, false, nil
	}
	return &gaugeLease{s: s, conn: conn}, true, nil
}

// gaugeLockSQL and gaugeUnlockSQL take and give back the gauge lease's
// lock (? is the table).
var (
	gaugeLockSQL   = statements.MustRenderNamed("snapshot.gauge_lock", nil)
	gaugeUnlockSQL = statements.MustRenderNamed("snapshot.gauge_unlock", nil)
)

type gaugeLease struct {
	s    *Store
	conn *sql.Conn
}

func (l *gaugeLease) Snapshot(ctx context.Context, req store.SnapshotRequest) (store.Snapshot, error) {
	return l.s.snapshot(ctx, l.conn, req)
}

// Release gives the lock back (the server frees a closed session's locks
// only a moment later) and discards the connection rather than pooling it.
func (l *gaugeLease) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = l.conn.ExecContext(ctx, gaugeUnlockSQL, l.s.t.Outbox)
	_ = l.conn.Raw(func(any) error { return errDiscard })
	l.conn.Close()
}

// errDiscard tells database/sql to close a connection instead of pooling it.
var errDiscard = fmt.Errorf("gauge lease released: %w", driver.ErrBadConn)
