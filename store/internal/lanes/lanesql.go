package lanes

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
)

// Querier is what the lease statements run on: the backend's write
// transaction (DB adapts a *sql.Tx or *sql.Conn).
type Querier interface {
	// Exec runs a statement and returns the rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Query runs a query.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Rows is what a query returns.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// DB adapts a database/sql transaction or connection to Querier.
func DB(q interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}) Querier {
	return sqlQuerier{q}
}

type sqlQuerier struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	}
}

func (s sqlQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlQuerier) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	rows, err := s.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// queryRow runs a query of one row into dest.
func queryRow(ctx context.Context, q Querier, query string, args []any, dest ...any) error {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Err()
}

// Dialect is what differs between the backends in the lease statements.
// The lane and member tables hold plain types (integers, text, Unix
// milliseconds of the database clock), so one set of statements serves
// the three backends.
type Dialect struct {
	// Dollar numbers placeholders $1, $2 (PostgreSQL) instead of ?.
	Dollar bool
	// Quote quotes identifiers: '"' or '`'.
	Quote byte
	// NowMS selects the database clock in Unix milliseconds.
	NowMS string
	// Upsert is the clause that turns the member insert into an update of
	// seen_ms when the relay's row exists.
	Upsert string
	// InsertIgnore and Conflict insert a lane row unless it exists.
	InsertIgnore, Conflict string
	// Lock locks the selected rows, and SkipLocked skips those another
	// transaction holds ("" on SQLite, whose write transaction already
	// excludes every other writer).
	Lock, SkipLocked string
	// TakeGuard, when set, returns a condition on a lane row that holds
	// only if no completion holds the lane (PostgreSQL: the lane's
	// advisory lock, which its completions take shared, is free); the
	// take of a lane then skips one being completed. Without it, the
	// completions' row locks on the lane rows do that.
	TakeGuard func(t store.Tables) string
}

// The three dialects.
var (
	PostgreSQL = Dialect{Dollar: true, Quote: '"', NowMS: `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`,
		Upsert:       `ON CONFLICT (relay_id) DO UPDATE SET seen_ms = EXCLUDED.seen_ms`,
		InsertIgnore: "INSERT INTO", Conflict: "ON CONFLICT DO NOTHING", Lock: "FOR UPDATE", SkipLocked: "SKIP LOCKED"}
	// MySQL's clock is UTC_TIMESTAMP(6) counted from the epoch: unlike
	// UNIX_TIMESTAMP(NOW()), it does not go through the session's time
	// zone, which repeats an hour when daylight saving time ends.
	MySQL = Dialect{Quote: '`', NowMS: `SELECT CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)`,
		Upsert:       `ON DUPLICATE KEY UPDATE seen_ms = VALUES(seen_ms)`,
		InsertIgnore: "INSERT IGNORE INTO", Lock: "FOR UPDATE", SkipLocked: "SKIP LOCKED"}
	SQLite = Dialect{Quote: '"', NowMS: `SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`,
		Upsert:       `ON CONFLICT (relay_id) DO UPDATE SET seen_ms = excluded.seen_ms`,
		InsertIgnore: "INSERT INTO", Conflict: "ON CONFLICT DO NOTHING"}
)

// statements are the lease statements, in the template syntax of the
// backends' queries: {{.Q}} quotes the tables {{.Lanes}} and {{.Members}},
// {{.P n}} is the n-th placeholder. Every value is a bind parameter, but
// for the fixed fragments: the lane rows to make, and the cursors to
// write (integers formatted by Go).
var statements = sqltext.MustParse("lanesql", `
{{define "ensure"}}{{.InsertIgnore}} {{.Q}}{{.Lanes}}{{.Q}} (lane, lease_until_ms, next_id) VALUES {{.Values}} {{.Conflict}}{{end}}

{{define "count"}}SELECT count(*) FROM {{.Q}}{{.Lanes}}{{.Q}}{{end}}

{{define "member"}}INSERT INTO {{.Q}}{{.Members}}{{.Q}} (relay_id, seen_ms) VALUES ({{.P 1}}, {{.P 2}}) {{.Upsert}}{{end}}

{{define "holdings"}}SELECT m.relay_id, (SELECT count(*) FROM {{.Q}}{{.Lanes}}{{.Q}} l
		WHERE l.owner = m.relay_id AND l.lease_until_ms > {{.P 1}}) FROM {{.Q}}{{.Members}}{{.Q}} m WHERE m.seen_ms > {{.P 2}}{{end}}

{{define "stale"}}SELECT relay_id FROM {{.Q}}{{.Members}}{{.Q}} WHERE seen_ms < {{.P 1}}{{end}}

{{define "prune"}}DELETE FROM {{.Q}}{{.Members}}{{.Q}} WHERE relay_id = {{.P 1}} AND seen_ms < {{.P 2}}{{end}}

{{define "leave"}}DELETE FROM {{.Q}}{{.Members}}{{.Q}} WHERE relay_id = {{.P 1}}{{end}}

{{define "mine"}}SELECT lane, token, lease_until_ms, next_id FROM {{.Q}}{{.Lanes}}{{.Q}}
		WHERE owner = {{.P 1}} ORDER BY lane {{.Lock}}{{end}}

{{define "renew"}}UPDATE {{.Q}}{{.Lanes}}{{.Q}} SET lease_until_ms = {{.P 1}}, next_id = {{.Cursors}}
		WHERE owner = {{.P 2}} AND lane IN ({{.LaneList}}){{end}}

{{define "release"}}UPDATE {{.Q}}{{.Lanes}}{{.Q}} SET owner = NULL, token = NULL, lease_until_ms = 0, next_id = {{.Cursors}}
		WHERE owner = {{.P 1}} AND lane IN ({{.LaneList}}){{end}}

{{define "free"}}SELECT lane, next_id, owner FROM {{.Q}}{{.Lanes}}{{.Q}}
		WHERE owner IS NULL OR lease_until_ms <= {{.P 1}} OR owner = {{.P 2}}
		ORDER BY lane LIMIT {{.Limit}} {{.Lock}} {{.SkipLocked}}{{end}}

{{define "take"}}UPDATE {{.Q}}{{.Lanes}}{{.Q}} SET owner = {{.P 1}}, token = {{.P 2}}, lease_until_ms = {{.P 3}}
		WHERE lane = {{.P 4}} AND (owner IS NULL OR lease_until_ms <= {{.P 5}} OR owner = {{.P 6}}){{.Guard}}{{end}}
`)

// names is what a statement renders with.
type names struct {
	Dialect
	Q, Lanes, Members string
	// Values, Cursors, LaneList and Limit are fixed fragments written by
	// Go from integers; Guard is the dialect's TakeGuard.
	Values, Cursors, LaneList, Guard string
	Limit                            int
}

// P is the n-th placeholder of the dialect.
func (n names) P(i int) string {
	if n.Dollar {
		return "$" + strconv.Itoa(i)
	}
	return "?"
}

// LaneTable and MemberTable name the lane and member tables of an outbox.
func LaneTable(t store.Tables) string   { return t.Outbox + "_lanes" }
func MemberTable(t store.Tables) string { return t.Outbox + "_members" }

func (d Dialect) render(t store.Tables, name string, n names) string {
	n.Dialect, n.Q = d, string(d.Quote)
	if d.TakeGuard != nil {
		n.Guard = " AND " + d.TakeGuard(t)
	}
	n.Lanes, n.Members = LaneTable(t), MemberTable(t)
	return statements.MustRenderNamed(name, n)
}

// laneList renders lane numbers as a list.
func laneList(lanes []int) string {
	parts := make([]string, len(lanes))
	for i, l := range lanes {
		parts[i] = strconv.Itoa(l)
	}
	return strings.Join(parts, ", ")
}

// cursorCase renders the next_id of a renew or release: the given cursor
// for each lane, never lower than the one stored.
func cursorCase(cursors map[int]int64) string {
	if len(cursors) == 0 {
		return "next_id"
	}
	var b strings.Builder
	b.WriteString("CASE")
	for _, l := range sortedLanes(cursors) {
		c := cursors[l]
		fmt.Fprintf(&b, " WHEN lane = %d AND next_id < %d THEN %d", l, c, c)
	}
	b.WriteString(" ELSE next_id END")
	return b.String()
}

// ensureValues renders the VALUES rows of every lane.
func ensureValues() string {
	parts := make([]string, Count)
	for l := range Count {
		parts[l] = "(" + strconv.Itoa(l) + ", 0, 0)"
	}
	return strings.Join(parts, ", ")
}
