package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/keysql"
)

// pgxKeyConn is what a pgx pool, connection and transaction have.
type pgxKeyConn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pgxConn adapts pgx to keysql.Conn.
type pgxConn struct{ q pgxKeyConn }

func (c pgxConn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (c pgxConn) QueryRow(ctx context.Context, query string, args ...any) keysql.Row {
	return pgxRow{c.q.QueryRow(ctx, query, args...)}
}

// pgxRow reports pgx's ErrNoRows as database/sql's.
type pgxRow struct{ r pgx.Row }

func (r pgxRow) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sql.ErrNoRows
	}
	return err
}

// keys returns the data keys on q.
func (s *Store) keys(q pgxKeyConn) keysql.Keys {
	return keysql.Keys{Conn: pgxConn{q}, Dialect: sqlDialect, Tables: s.t}
}

// sqlKeys returns the data keys on a database/sql querier.
func (s *Store) sqlKeys(q keysql.Querier) keysql.Keys {
	return keysql.Keys{Conn: keysql.SQL(q), Dialect: sqlDialect, Tables: s.t}
}

// CreateDataKey implements store.Store: one statement and a read, in a
// READ COMMITTED transaction.
func (s *Store) CreateDataKey(ctx context.Context, k encrypt.DataKey) (out encrypt.DataKey, err error) {
	err = pgx.BeginFunc(context.WithoutCancel(ctx), s.pool, func(tx pgx.Tx) (err error) {
		out, err = s.keys(tx).CreateDataKey(ctx, k)
		return err
	})
	return out, s.wrap("store data key", err)
}

// LatestDataKey implements store.Store.
func (s *Store) LatestDataKey(ctx context.Context, subject string) (encrypt.DataKey, bool, error) {
	k, ok, err := s.keys(s.pool).LatestDataKey(ctx, subject)
	return k, ok, s.wrap("read data key", err)
}

// DataKeyVersion implements store.Store.
func (s *Store) DataKeyVersion(ctx context.Context, subject string, version int) (encrypt.DataKey, bool, error) {
	k, ok, err := s.keys(s.pool).DataKeyVersion(ctx, subject, version)
	return k, ok, s.wrap("read data key", err)
}

// DataKeys implements store.Store.
func (s *Store) DataKeys(ctx context.Context, after store.DataKeyCursor, limit int) ([]encrypt.DataKey, error) {
	var out []encrypt.DataKey
	err := s.withDB(func(db *sql.DB) (err error) {
		out, err = keysql.Page(ctx, db, sqlDialect, s.t, after, limit)
		return err
	})
	return out, s.wrap("read data keys", err)
}

// RewrapDataKey implements store.Store: one statement.
func (s *Store) RewrapDataKey(ctx context.Context, k encrypt.DataKey, fromKEK string) (bool, error) {
	ok, err := s.keys(s.pool).Rewrap(ctx, k, fromKEK)
	return ok, s.wrap("rewrap data key", err)
}

// ShredDataKeys implements store.Store: one statement.
func (s *Store) ShredDataKeys(ctx context.Context, sh store.Shred) (int64, error) {
	n, err := s.keys(s.pool).Shred(ctx, sh)
	return n, s.wrap("shred data keys", err)
}

// SealPending implements store.Store: one transaction.
func (s *Store) SealPending(ctx context.Context, rows []store.SealedPayload) (n int64, err error) {
	err = pgx.BeginFunc(context.WithoutCancel(ctx), s.pool, func(tx pgx.Tx) (err error) {
		n, err = s.keys(tx).SealPending(ctx, rows)
		return err
	})
	return n, s.wrap("seal plain payloads", err)
}
