// Package routesql is the SQL of the routes of store.Store, shared by the three
// backends: the route tables hold plain types (text, integers, Unix
// milliseconds of the database clock), so one set of statements serves
// PostgreSQL, MySQL/MariaDB and SQLite, each run inside the backend's own
// transaction.
package routesql

import (
	"context"
	"database/sql"
	"embed"
	"strings"
	"time"

	"github.com/txoutbox/outbox/internal/runes"
	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/dialect"
)

// Querier is what a statement runs on: a *sql.Tx, a *sql.Conn or a *sql.DB.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// statements are the route statements of sql/routesql.sql, parsed once.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

var statements = sqltext.MustParseFS(sqlFiles, "sql/*.sql")

// names is what a statement renders with: the dialect, the tables, and the
// log's filter and size (fixed fragments, never caller text).
type names struct {
	dialect.Dialect
	Q           string
	Routes, Log string
	ByRoute     bool
	Limit       int
}

// sql renders the statement name for the tables t (the log's filter and
// size in n, when it is the log's select).
func render(d dialect.Dialect, t store.Tables, name string, n names) string {
	n.Dialect, n.Q = d, d.Quote
	n.Routes, n.Log = t.RouteTable(), t.RouteLogTable()
	return statements.MustRenderNamed("routesql."+name, n)
}

// Now reads the database clock.
func Now(ctx context.Context, q Querier, d dialect.Dialect) (time.Time, error) {
	var ms int64
	if err := q.QueryRowContext(ctx, render(d, store.Tables{}, "now_ms", names{})).Scan(&ms); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(ms).UTC(), nil
}

// Snapshot reads every route row and the database clock.
func Snapshot(ctx context.Context, q Querier, d dialect.Dialect, t store.Tables) (store.RouteSnapshot, error) {
	now, err := Now(ctx, q, d)
	if err != nil {
		return store.RouteSnapshot{}, err
	}
	rows, err := q.QueryContext(ctx, render(d, t, "snapshot", names{}))
	if err != nil {
		return store.RouteSnapshot{}, err
	}
	defer rows.Close()
	snap := store.RouteSnapshot{DBTime: now}
	for rows.Next() {
		r, err := scanRoute(rows)
		if err != nil {
			return store.RouteSnapshot{}, err
		}
		snap.Routes = append(snap.Routes, r)
	}
	return snap, rows.Err()
}

type scanner interface{ Scan(dest ...any) error }

func scanRoute(s scanner) (store.Route, error) {
	var (
		r                        store.Route
		state                    string
		opened, probe            sql.NullInt64
		probeBy, lastErr         sql.NullString
		opens, forced, updatedMS int64
	)
	if err := s.Scan(&r.Name, &state, &r.Version, &opened, &probe, &probeBy, &opens, &forced, &lastErr, &updatedMS); err != nil {
		return r, err
	}
	r.State = store.BreakerState(state)
	r.OpenedAt, r.ProbeAt = msTime(opened), msTime(probe)
	r.ProbeBy, r.LastError = probeBy.String, lastErr.String
	r.Opens, r.Forced = int(opens), forced != 0
	r.UpdatedAt = time.UnixMilli(updatedMS).UTC()
	return r, nil
}

func msTime(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}

// Change applies c inside the caller's write transaction q (see
// store.Store.ChangeRoute).
func Change(ctx context.Context, q Querier, d dialect.Dialect, t store.Tables, c store.RouteChange) (bool, error) {
	if err := c.Validate(); err != nil {
		return false, err
	}
	now, err := Now(ctx, q, d)
	if err != nil {
		return false, err
	}
	nowMS := now.UnixMilli()
	// A route without a row is CLOSED at version 0: make the row, so that
	// the compare-and-set below has a row to lock and compare.
	if _, err := q.ExecContext(ctx, render(d, t, "ensure", names{}), c.Route, nowMS); err != nil {
		return false, err
	}
	cur, err := scanRoute(q.QueryRowContext(ctx, render(d, t, "lock", names{}), c.Route))
	if err != nil {
		return false, err
	}
	if cur.Version != c.Version {
		return false, nil
	}
	var opened, probe, probeBy any // NULL unless set below
	if c.To != store.BreakerClosed {
		opened = nowMS
		if !cur.OpenedAt.IsZero() {
			opened = cur.OpenedAt.UnixMilli()
		}
		probe = nowMS + c.ProbeIn.Milliseconds()
	}
	if c.To == store.BreakerHalfOpen {
		probeBy = clean(c.ProbeBy, 200)
	}
	forced := 0
	if c.Forced {
		forced = 1
	}
	lastErr := any(nil)
	if c.LastError != "" {
		lastErr = clean(c.LastError, store.MaxRouteTextRunes)
	}
	res, err := q.ExecContext(ctx, render(d, t, "update", names{}),
		string(c.To), opened, probe, probeBy, c.Opens, forced, lastErr, nowMS, c.Route, c.Version)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return false, err
	}
	if _, err := q.ExecContext(ctx, render(d, t, "log_insert", names{}),
		nowMS, c.Route, clean(c.Actor, 200), string(cur.State), string(c.To), clean(c.Reason, store.MaxRouteTextRunes), lastErr); err != nil {
		return false, err
	}
	return true, nil
}

// Log reads audit rows, newest first (route "" for every route).
func Log(ctx context.Context, q Querier, d dialect.Dialect, t store.Tables, route string, limit int) ([]store.RouteLogEntry, error) {
	if limit <= 0 || limit > 10000 {
		limit = 100
	}
	args := []any{}
	if route != "" {
		args = append(args, route)
	}
	query := render(d, t, "log_select", names{ByRoute: route != "", Limit: limit})
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.RouteLogEntry
	for rows.Next() {
		var (
			e        store.RouteLogEntry
			atMS     int64
			from, to string
			lastErr  sql.NullString
		)
		if err := rows.Scan(&atMS, &e.Route, &e.Actor, &from, &to, &e.Reason, &lastErr); err != nil {
			return nil, err
		}
		e.At, e.From, e.To, e.LastError = time.UnixMilli(atMS).UTC(), store.BreakerState(from), store.BreakerState(to), lastErr.String
		out = append(out, e)
	}
	return out, rows.Err()
}

// clean makes s storable by every backend whatever it holds: valid UTF-8
// without NUL, at most n characters.
func clean(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	return runes.Truncate(s, n)
}
