// Package routesql is the SQL of store.RouteStore, shared by the three
// backends: the route tables hold plain types (text, integers, Unix
// milliseconds of the database clock), so one set of statements serves
// PostgreSQL, MySQL/MariaDB and SQLite, each run inside the backend's own
// transaction.
package routesql

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox/internal/runes"
	"github.com/txoutbox/outbox/store"
)

// Querier is what a statement runs on: a *sql.Tx, a *sql.Conn or a *sql.DB.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Dialect is what differs between the backends.
type Dialect struct {
	// Dollar numbers placeholders $1, $2 (PostgreSQL) instead of ?.
	Dollar bool
	// Quote quotes identifiers: '"' or '`'.
	Quote byte
	// NowMS selects the database clock in Unix milliseconds.
	NowMS string
	// InsertIgnore is the statement prefix that inserts a row unless its
	// key exists, and Conflict its suffix ("ON CONFLICT DO NOTHING" or "").
	InsertIgnore, Conflict string
	// ForUpdate locks the selected row ("" on SQLite, whose write
	// transaction already excludes every other writer).
	ForUpdate string
}

// PostgreSQL, MySQL and SQLite are the three dialects.
var (
	PostgreSQL = Dialect{Dollar: true, Quote: '"', NowMS: `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`,
		InsertIgnore: "INSERT INTO", Conflict: "ON CONFLICT DO NOTHING", ForUpdate: "FOR UPDATE"}
	MySQL = Dialect{Quote: '`', NowMS: `SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000 AS SIGNED)`,
		InsertIgnore: "INSERT IGNORE INTO", ForUpdate: "FOR UPDATE"}
	SQLite = Dialect{Quote: '"', NowMS: `SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`,
		InsertIgnore: "INSERT INTO", Conflict: "ON CONFLICT DO NOTHING"}
)

// sql renders q: {r} and {l} become the quoted route and log tables, ? the
// dialect's placeholders.
func (d Dialect) sql(t store.Tables, q string) string {
	quote := func(s string) string { return string(d.Quote) + s + string(d.Quote) }
	q = strings.NewReplacer("{r}", quote(t.RouteTable()), "{l}", quote(t.RouteLogTable())).Replace(q)
	if !d.Dollar {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

const routeColumns = `route, state, version, opened_at_ms, probe_at_ms, probe_by, opens, forced, last_error, updated_at_ms`

// Now reads the database clock.
func Now(ctx context.Context, q Querier, d Dialect) (time.Time, error) {
	var ms int64
	if err := q.QueryRowContext(ctx, d.NowMS).Scan(&ms); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(ms).UTC(), nil
}

// Snapshot reads every route row and the database clock.
func Snapshot(ctx context.Context, q Querier, d Dialect, t store.Tables) (store.RouteSnapshot, error) {
	now, err := Now(ctx, q, d)
	if err != nil {
		return store.RouteSnapshot{}, err
	}
	rows, err := q.QueryContext(ctx, d.sql(t, `SELECT `+routeColumns+` FROM {r} ORDER BY route`))
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
// store.RouteStore.ChangeRoute).
func Change(ctx context.Context, q Querier, d Dialect, t store.Tables, c store.RouteChange) (bool, error) {
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
	if _, err := q.ExecContext(ctx, d.sql(t, d.InsertIgnore+` {r} (route, state, version, opens, forced, updated_at_ms)
		VALUES (?, 'CLOSED', 0, 0, 0, ?) `+d.Conflict), c.Route, nowMS); err != nil {
		return false, err
	}
	cur, err := scanRoute(q.QueryRowContext(ctx, d.sql(t, `SELECT `+routeColumns+` FROM {r} WHERE route = ? `+d.ForUpdate), c.Route))
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
	res, err := q.ExecContext(ctx, d.sql(t, `UPDATE {r} SET state = ?, version = version + 1, opened_at_ms = ?,
		probe_at_ms = ?, probe_by = ?, opens = ?, forced = ?, last_error = ?, updated_at_ms = ?
		WHERE route = ? AND version = ?`),
		string(c.To), opened, probe, probeBy, c.Opens, forced, lastErr, nowMS, c.Route, c.Version)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return false, err
	}
	if _, err := q.ExecContext(ctx, d.sql(t, `INSERT INTO {l} (at_ms, route, actor, from_state, to_state, reason, last_error)
		VALUES (?, ?, ?, ?, ?, ?, ?)`),
		nowMS, c.Route, clean(c.Actor, 200), string(cur.State), string(c.To), clean(c.Reason, store.MaxRouteTextRunes), lastErr); err != nil {
		return false, err
	}
	return true, nil
}

// Log reads audit rows, newest first (route "" for every route).
func Log(ctx context.Context, q Querier, d Dialect, t store.Tables, route string, limit int) ([]store.RouteLogEntry, error) {
	if limit <= 0 || limit > 10000 {
		limit = 100
	}
	query := `SELECT at_ms, route, actor, from_state, to_state, reason, last_error FROM {l}`
	args := []any{}
	if route != "" {
		query += ` WHERE route = ?`
		args = append(args, route)
	}
	query += ` ORDER BY id DESC LIMIT ` + strconv.Itoa(limit)
	rows, err := q.QueryContext(ctx, d.sql(t, query), args...)
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
