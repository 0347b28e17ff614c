package mysql

import (
	"context"
	"database/sql"

	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/keysql"
)

// keys returns the data keys on c.
func (s *Store) keys(c keysql.Conn) keysql.Keys {
	return keysql.Keys{Conn: c, Dialect: sqlDialect, Tables: s.t}
}

// CreateDataKey implements store.Store: one READ COMMITTED transaction, retried on deadlocks.
func (s *Store) CreateDataKey(ctx context.Context, k encrypt.DataKey) (out encrypt.DataKey, err error) {
	err = s.inTx(ctx, "store data key", func(tx *sql.Tx) (err error) {
		out, err = s.keys(keysql.SQL(tx)).CreateDataKey(ctx, k)
		return err
	})
	return out, s.wrap("store data key", err)
}

// LatestDataKey implements store.Store.
func (s *Store) LatestDataKey(ctx context.Context, subject string) (encrypt.DataKey, bool, error) {
	k, ok, err := s.keys(keysql.SQL(s.db)).LatestDataKey(ctx, subject)
	return k, ok, s.wrap("read data key", err)
}

// DataKeyVersion implements store.Store.
func (s *Store) DataKeyVersion(ctx context.Context, subject string, version int) (encrypt.DataKey, bool, error) {
	k, ok, err := s.keys(keysql.SQL(s.db)).DataKeyVersion(ctx, subject, version)
	return k, ok, s.wrap("read data key", err)
}

// DataKeys implements store.Store.
func (s *Store) DataKeys(ctx context.Context, after store.DataKeyCursor, limit int) ([]encrypt.DataKey, error) {
	out, err := keysql.Page(ctx, s.db, sqlDialect, s.t, after, limit)
	return out, s.wrap("read data keys", err)
}

// RewrapDataKey implements store.Store: one READ COMMITTED transaction, retried on deadlocks.
func (s *Store) RewrapDataKey(ctx context.Context, k encrypt.DataKey, fromKEK string) (ok bool, err error) {
	err = s.inTx(ctx, "rewrap data key", func(tx *sql.Tx) (err error) {
		ok, err = s.keys(keysql.SQL(tx)).Rewrap(ctx, k, fromKEK)
		return err
	})
	return ok, s.wrap("rewrap data key", err)
}

// ShredDataKeys implements store.Store: one READ COMMITTED transaction, retried on deadlocks.
func (s *Store) ShredDataKeys(ctx context.Context, sh store.Shred) (n int64, err error) {
	err = s.inTx(ctx, "shred data keys", func(tx *sql.Tx) (err error) {
		n, err = s.keys(keysql.SQL(tx)).Shred(ctx, sh)
		return err
	})
	return n, s.wrap("shred data keys", err)
}

// SealPending implements store.Store: one READ COMMITTED transaction,
// retried on deadlocks.
func (s *Store) SealPending(ctx context.Context, rows []store.SealedPayload) (n int64, err error) {
	err = s.inTx(ctx, "seal plain payloads", func(tx *sql.Tx) (err error) {
		n, err = s.keys(keysql.SQL(tx)).SealPending(ctx, rows)
		return err
	})
	return n, s.wrap("seal plain payloads", err)
}
