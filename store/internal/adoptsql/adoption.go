package adoptsql

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// Statuses are the statuses a table must hold to be adopted: the
// outbox's own; PROCESSING rows are set to PENDING.
var Statuses = []string{"PENDING", "PROCESSING", "PROCESSED", "FAILED", "EXPIRED", "BLOCKED", "SKIPPED"}

// RequiredColumns are the columns a table must already have to be
// adopted: what no default can invent.
var RequiredColumns = []string{"id", "aggregate_id", "event_type", "payload", "status", "created_at"}

// CheckStatuses returns an error naming the statuses (with their counts)
// that adoption cannot map, or nil.
func CheckStatuses(table string, counts map[string]int64, nulls int64) error {
	var bad []string
	if nulls > 0 {
		bad = append(bad, fmt.Sprintf("NULL (%d rows)", nulls))
	}
	statuses := make([]string, 0, len(counts))
	for st := range counts {
		statuses = append(statuses, st)
	}
	sort.Strings(statuses)
	for _, st := range statuses {
		known := false
		for _, k := range Statuses {
			known = known || k == st
		}
		if !known {
			bad = append(bad, fmt.Sprintf("%q (%d rows)", st, counts[st]))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("cannot adopt table %s: status values %s are not outbox statuses (%s); update those rows first, nothing was changed",
		table, strings.Join(bad, ", "), strings.Join(Statuses, ", "))
}

// Note is the audit row's error text for such a row.
const Note = "PROCESSING under the previous scheduler when outbox adopted the table: set to PENDING"

// Table names the record of what adoption added to a table.
func Table(t store.Tables) string { return t.Outbox + "_adoption" }

var aggregateTypeRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,100}$`)

// ValidateOptions checks the options of an adoption.
func ValidateOptions(o store.AdoptOptions) error {
	if o.AggregateType == "" {
		return fmt.Errorf("%w: adoption needs the aggregate type of the existing rows: add --aggregate-type (for example --aggregate-type payment)", outbox.ErrInvalidConfig)
	}
	if !aggregateTypeRE.MatchString(o.AggregateType) {
		return fmt.Errorf("%w: aggregate type %q is not allowed for adoption: use 1 to 100 characters from A-Z, a-z, 0-9 and _ . : -", outbox.ErrInvalidConfig, o.AggregateType)
	}
	return nil
}

// Names is what the backends' adoption statements render with: the
// tables, the adoption record's table, and the audit outcome and note of
// a row that adoption set back to PENDING.
type Names struct {
	store.Tables
	Record, Outcome, Note string
}

// NamesFor returns the Names of the tables t.
func NamesFor(t store.Tables) Names {
	return Names{Tables: t, Record: Table(t), Outcome: string(store.AdoptedOutcome), Note: Note}
}
