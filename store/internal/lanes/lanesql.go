package lanes

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/dialect"
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

// statements are the lease statements of sql/lanesql.sql, parsed once.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

var statements = sqltext.MustParseFS(sqlFiles, "sql/*.sql")

// names is what a statement renders with.
type names struct {
	dialect.Dialect
	Q, Lanes, Members string
	// Values, Cursors, LaneList and Limit are fixed fragments written by
	// Go from integers.
	Values, Cursors, LaneList string
	Limit                     int
}

// LaneTable and MemberTable name the lane and member tables of an outbox.
func LaneTable(t store.Tables) string   { return t.Outbox + "_lanes" }
func MemberTable(t store.Tables) string { return t.Outbox + "_members" }

// render renders the statement lanesql.<name> in the dialect d for the
// tables t.
func render(d dialect.Dialect, t store.Tables, name string, n names) string {
	n.Dialect, n.Q = d, d.Quote
	n.Lanes, n.Members = LaneTable(t), MemberTable(t)
	return statements.MustRenderNamed("lanesql."+name, n)
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
