package sqlite

import (
	"context"
	"database/sql"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/routesql"
)

// Routes implements store.Store.
func (s *Store) Routes(ctx context.Context) (store.RouteSnapshot, error) {
	snap, err := routesql.Snapshot(ctx, s.db, sqlDialect, s.t)
	return snap, s.wrap("read routes", err)
}

// ChangeRoute implements store.Store: one BEGIN IMMEDIATE transaction.
func (s *Store) ChangeRoute(ctx context.Context, c store.RouteChange) (bool, error) {
	if err := c.Validate(); err != nil {
		return false, err
	}
	var ok bool
	err := s.writeTx(ctx, func(conn *sql.Conn, _ string) (err error) {
		ok, err = routesql.Change(ctx, conn, sqlDialect, s.t, c)
		return err
	})
	return ok, s.wrap("change route", err)
}

// RouteLog implements store.Store.
func (s *Store) RouteLog(ctx context.Context, route string, limit int) ([]store.RouteLogEntry, error) {
	out, err := routesql.Log(ctx, s.db, sqlDialect, s.t, route, limit)
	return out, s.wrap("read route log", err)
}
