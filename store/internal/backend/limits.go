package backend

import (
	"embed"

	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
)

// DeadLetterLimit returns how many rows Store.DeadLetters returns for
// limit: limit itself from 1 to 1000, otherwise 100.
func DeadLetterLimit(limit int) int {
	if limit <= 0 || limit > 1000 {
		return 100
	}
	return limit
}

// RelaysTable is the heartbeat table of outbox table t (migration 00005).
func RelaysTable(t store.Tables) string { return t.Outbox + "_relays" }

// MaxOverdueGroups bounds store.Overdue.Groups (its doc says 20).
const MaxOverdueGroups = 20

// statements are the SQL fragments the backends share, sql/limits.sql.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

var statements = sqltext.MustParseFS(sqlFiles, "sql/*.sql")

// OverdueWhere renders the condition of an overdue row with now, the
// backend's fixed expression of the database clock ("now()",
// "UTC_TIMESTAMP(6)", or a bind parameter such as "?1"), never user text.
func OverdueWhere(now string) string {
	s, err := statements.RenderNamed("limits.overdue_where", struct{ Now string }{now})
	if err != nil {
		panic(err) // a bug in sql/limits.sql, caught by every backend's tests
	}
	return s
}
