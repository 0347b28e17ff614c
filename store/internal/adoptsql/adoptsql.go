// Package adoptsql holds the parts of schema inspection, migration planning
// and adoption that the SQL backends share: the checks a store.Schema
// decides, the plan of a migration down, and the rendering of planned
// steps. Each backend keeps its own catalog queries and DDL.
package adoptsql

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/txoutbox/outbox/internal/migrate"
	"github.com/txoutbox/outbox/store"
)

// MissingColumns returns the columns of want that have lacks, in want's order.
func MissingColumns(want, have []string) []string {
	var out []string
	for _, c := range want {
		if !slices.Contains(have, c) {
			out = append(out, c)
		}
	}
	return out
}

// CheckUp refuses to migrate up a table that outbox did not create, and one
// whose adoption did not finish.
func CheckUp(sc store.Schema) error {
	if sc.Foreign() {
		return store.ForeignError(sc.Table, sc.Missing)
	}
	if sc.Adopted && sc.Current < 1 {
		return fmt.Errorf("%w: the adoption of table %s did not finish: run outbox migrate --adopt --table %s again to complete it", store.ErrForeignTable, sc.Table, sc.Table)
	}
	return nil
}

// ForeignDown is the refusal to migrate down (drop) a table that outbox did
// not create.
func ForeignDown(table string, missing []string) error {
	return fmt.Errorf("%w: table %s lacks the outbox columns %s: outbox did not create it and will not drop it; nothing was changed",
		store.ErrForeignTable, table, strings.Join(missing, ", "))
}

// PlanSQL renders planned migration steps, each headed by its version; it
// passes err through.
func PlanSQL(steps []migrate.Step, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	var out []string
	for _, st := range steps {
		out = append(out, fmt.Sprintf("-- migration %05d\n%s", st.Version, st.SQL))
	}
	return out, nil
}

// PlanDown returns the SQL a migration down of sc's table would run with r:
// on an adopted table, the later migrations down to version 1 then unadopt's
// statements (which remove only what adoption added); a foreign table is
// refused; otherwise every migration down to version 0.
func PlanDown(ctx context.Context, sc store.Schema, r *migrate.Runner, unadopt func(context.Context) ([]string, error)) ([]string, error) {
	switch {
	case sc.Adopted:
		later, err := PlanSQL(r.PlanDownTo(ctx, 1))
		if err != nil {
			return nil, err
		}
		undo, err := unadopt(ctx)
		return append(later, undo...), err
	case sc.Foreign():
		return nil, ForeignDown(sc.Table, sc.Missing)
	}
	return PlanSQL(r.PlanDownTo(ctx, 0))
}

// FirstLine returns q's first line, to name a statement in an error.
func FirstLine(q string) string {
	if i := strings.IndexByte(q, '\n'); i >= 0 {
		return q[:i]
	}
	return q
}

// CheckAdoptable refuses the adoption of a table that does not exist or
// that outbox created itself, and reports whether an earlier run already
// adopted it (so that only the later migrations remain).
func CheckAdoptable(sc store.Schema) (alreadyAdopted bool, err error) {
	switch {
	case !sc.Exists:
		return false, fmt.Errorf("%w: there is no table %s to adopt: outbox migrate --table %s creates it", store.ErrForeignTable, sc.Table, sc.Table)
	case !sc.Foreign() && !sc.Adopted:
		return false, fmt.Errorf("%w: table %s was created by outbox (schema version %d of %d): there is nothing to adopt; run outbox migrate --table %s",
			store.ErrForeignTable, sc.Table, sc.Current, sc.Latest, sc.Table)
	}
	return !sc.Foreign() && sc.Current >= 1, nil
}

// AfterAdoptionSQL is the tail of an adoption's plan: recording version 1
// as applied in the version table migrations, then the later pending steps
// (version 1 itself, which adoption replaces, left out).
func AfterAdoptionSQL(migrations string, pending []migrate.Step) []string {
	out := []string{"-- record schema version 1 as applied in " + migrations}
	later, _ := PlanSQL(slices.DeleteFunc(pending, func(st migrate.Step) bool { return st.Version == 1 }), nil)
	return append(out, later...)
}

// FinishAdoption records version 1 as applied, since adoption brought the
// table to its shape, then applies the later migrations.
func FinishAdoption(ctx context.Context, r *migrate.Runner) ([]int64, error) {
	if err := r.MarkApplied(ctx, 1); err != nil {
		return nil, err
	}
	return r.Up(ctx)
}
