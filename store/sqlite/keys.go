package sqlite

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

// CreateDataKey implements store.Store: one BEGIN IMMEDIATE transaction.
func (s *Store) CreateDataKey(ctx context.Context, k encrypt.DataKey) (out encrypt.DataKey, err error) {
	err = s.writeTx(ctx, func(c *sql.Conn, _ string) (err error) {
		out, err = s.keys(keysql.SQL(c)).CreateDataKey(ctx, k)
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

// RewrapDataKey implements store.Store: one BEGIN IMMEDIATE transaction.
func (s *Store) RewrapDataKey(ctx context.Context, k encrypt.DataKey, fromKEK string) (ok bool, err error) {
	err = s.writeTx(ctx, func(c *sql.Conn, _ string) (err error) {
		ok, err = s.keys(keysql.SQL(c)).Rewrap(ctx, k, fromKEK)
		return err
	})
	return ok, s.wrap("rewrap data key", err)
}

// ShredDataKeys implements store.Store: one BEGIN IMMEDIATE transaction.
func (s *Store) ShredDataKeys(ctx context.Context, sh store.Shred) (n int64, err error) {
	err = s.writeTx(ctx, func(c *sql.Conn, _ string) (err error) {
		n, err = s.keys(keysql.SQL(c)).Shred(ctx, sh)
		return err
	})
	return n, s.wrap("shred data keys", err)
}

// SealPending implements store.Store: one BEGIN IMMEDIATE transaction.
func (s *Store) SealPending(ctx context.Context, rows []store.SealedPayload) (n int64, err error) {
	err = s.writeTx(ctx, func(c *sql.Conn, _ string) (err error) {
		n, err = s.keys(keysql.SQL(c)).SealPending(ctx, rows)
		return err
	})
	return n, s.wrap("seal plain payloads", err)
}
