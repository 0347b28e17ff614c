package destconfig

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/txoutbox/outbox/store"
)

// TableSuffix joins an outbox table's name and a destination's name into
// the destination table's default name: outbox_events_to_gateway.
const TableSuffix = "_to_"

var notInTableName = regexp.MustCompile(`[^a-z0-9_]`)

// DefaultTable is the destination table of destination name for the
// outbox table outboxTable when the file gives no table: the outbox's
// name, "_to_", and the destination's name in lower case with '.' and '-'
// as '_'.
func DefaultTable(outboxTable, name string) string {
	return outboxTable + TableSuffix + notInTableName.ReplaceAllString(strings.ToLower(name), "_")
}

// Tables returns the destination table of each destination, by name, for
// the outbox table outboxTable: the one its table: names, or
// [DefaultTable]. Every destination of the file has one; two destinations
// may not share one, and none may be the outbox table itself or one of
// its own tables. An [*Error] names the line of each destination to fix.
func (c *Config) Tables(outboxTable string) (map[string]string, error) {
	own, err := store.TablesFor(outboxTable)
	if err != nil {
		return nil, err
	}
	tables := make(map[string]string, len(c.Destinations))
	users := map[string]Destination{}
	var problems []Problem
	for _, d := range c.Destinations {
		t, line, how := d.Table, d.TableLine, "its table:"
		if t == "" {
			t, line, how = DefaultTable(outboxTable, d.Name), d.Line, "its default table"
		}
		fail := func(format string, args ...any) {
			problems = append(problems, Problem{File: c.File, Line: line, Message: fmt.Sprintf(format, args...)})
		}
		switch other, dup := users[t]; {
		case t == own.Outbox || t == own.DeadLetters || t == own.Attempts || t == own.Migrations ||
			(strings.HasPrefix(t, outboxTable+"_") && !strings.HasPrefix(t, outboxTable+TableSuffix)):
			fail("destination %s: %s %s is or may become a table of the outbox %s itself (%s_lanes, %s_claims, ...): "+
				"give it table: with a name of its own, or one that begins with %s%s", quote(d.Name), how, t, outboxTable, outboxTable, outboxTable, outboxTable, TableSuffix)
		case dup:
			fail("destination %s: %s %s is also the table of destination %s (line %d): give one of them table: with another name", quote(d.Name), how, t, quote(other.Name), other.Line)
		default:
			if err := store.ValidateTable(t); err != nil && d.Table == "" {
				fail("destination %s: its default table %s is too long or not a plain name (%d characters at most): give it table: with a shorter name", quote(d.Name), t, store.MaxTableLen)
			}
		}
		users[t] = d
		tables[d.Name] = t
	}
	if len(problems) > 0 {
		return nil, &Error{File: c.File, Problems: problems}
	}
	return tables, nil
}
