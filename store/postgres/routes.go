package postgres

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/routesql"
)

// withDB runs f on a database/sql view of the pool (the route statements
// are shared with the other backends).
func (s *Store) withDB(f func(db *sql.DB) error) error {
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	return f(db)
}

// Routes implements store.Store.
func (s *Store) Routes(ctx context.Context) (store.RouteSnapshot, error) {
	var snap store.RouteSnapshot
	err := s.withDB(func(db *sql.DB) (err error) {
		snap, err = routesql.Snapshot(ctx, db, sqlDialect, s.t)
		return err
	})
	return snap, s.wrap("read routes", err)
}

// ChangeRoute implements store.Store: one READ COMMITTED transaction
// that locks the route's row.
func (s *Store) ChangeRoute(ctx context.Context, c store.RouteChange) (bool, error) {
	if err := c.Validate(); err != nil {
		return false, err
	}
	var ok bool
	err := s.withDB(func(db *sql.DB) error {
		tx, err := db.BeginTx(context.WithoutCancel(ctx), nil)
		if err != nil {
			return err
		}
		ok, err = routesql.Change(ctx, tx, sqlDialect, s.t, c)
		if err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
	return ok, s.wrap("change route", err)
}

// RouteLog implements store.Store.
func (s *Store) RouteLog(ctx context.Context, route string, limit int) ([]store.RouteLogEntry, error) {
	var out []store.RouteLogEntry
	err := s.withDB(func(db *sql.DB) (err error) {
		out, err = routesql.Log(ctx, db, sqlDialect, s.t, route, limit)
		return err
	})
	return out, s.wrap("read route log", err)
}
