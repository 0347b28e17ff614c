package store

import (
	"errors"
	"fmt"
	"strings"
)

// ErrForeignTable is returned when an outbox table name is taken by a
// table that outbox did not create (and has not adopted): the migrations
// neither take it over nor drop it.
var ErrForeignTable = errors.New("table not created by outbox")

// Schema is what a store found in the database for its outbox table.
type Schema struct {
	Table string
	// Exists: the outbox table exists.
	Exists bool
	// Missing lists the columns of the outbox's first migration that the
	// table lacks. A table with missing columns was not created by outbox:
	// it is foreign until adopted.
	Missing []string
	// Current and Latest are the applied and the latest schema versions.
	Current, Latest int64
	// Adopted: the table was the team's own and "migrate --adopt" brought
	// it to the outbox's shape; --down removes only what adoption added.
	Adopted bool
	// Unfinished counts the events still to be delivered or decided
	// (PENDING, PROCESSING, BLOCKED, FAILED); 0 when the table is foreign
	// or missing.
	Unfinished int64
}

// Foreign reports whether the table exists but lacks outbox columns.
func (s Schema) Foreign() bool { return s.Exists && len(s.Missing) > 0 }

// Problem returns why the schema cannot serve a relay ("" when it can):
// missing, foreign, or out of date.
func (s Schema) Problem() string {
	switch {
	case !s.Exists:
		return fmt.Sprintf("table %s does not exist: run outbox migrate --table %s", s.Table, s.Table)
	case s.Foreign():
		return ForeignError(s.Table, s.Missing).Error()
	case s.Current < s.Latest:
		return fmt.Sprintf("table %s is at schema version %d of %d: run outbox migrate --table %s", s.Table, s.Current, s.Latest, s.Table)
	}
	return ""
}

// ForeignError is the refusal for a table outbox did not create: which
// columns are missing and the command that adopts the table.
func ForeignError(table string, missing []string) error {
	return fmt.Errorf("%w: table %s exists but lacks the outbox columns %s; outbox will not take over or drop a table it did not create. "+
		"To upgrade it in place, keeping its rows: outbox migrate --adopt --table %s --aggregate-type <type> (add --dry-run to print the SQL first)",
		ErrForeignTable, table, strings.Join(missing, ", "), table)
}

// AdoptOptions configures the adoption of an existing table.
type AdoptOptions struct {
	// AggregateType fills aggregate_type for the existing rows and stays the
	// column's default, so that the team's INSERTs keep working. Required.
	AggregateType string
	// DryRun plans the statements and changes nothing.
	DryRun bool
}

// AdoptResult reports an adoption.
type AdoptResult struct {
	// SQL is every statement adoption ran (or, with DryRun, would run), in
	// order, ending with the later migrations' SQL.
	SQL []string
	// Rows counts the table's rows, and Requeued the PROCESSING ones set to
	// PENDING (each with an audit row).
	Rows, Requeued int64
	// DeadLettered counts the FAILED rows, each kept FAILED with a dead
	// letter whose reason says it was adopted as FAILED; Finished counts
	// the rows in another final status (PROCESSED, EXPIRED, SKIPPED), which
	// the relay's retention keeps unless told otherwise.
	DeadLettered, Finished int64
	// Applied lists the later migrations applied after adoption.
	Applied []int64
	// AlreadyAdopted: an earlier run adopted the table; only the later
	// migrations were applied.
	AlreadyAdopted bool
}

// AdoptedOutcome is the audit outcome written for each row that was
// PROCESSING under the previous scheduler when its table was adopted, and
// was set to PENDING.
const AdoptedOutcome OutcomeKind = "ADOPTED"
