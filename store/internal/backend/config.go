// Package backend holds the plumbing every store backend shares and no user
// of the Store seam needs: configuration resolution, error wrapping, the
// headers column, the enqueue observers, the scans of status counts and
// blocked aggregates, and a few limits and SQL fragments common to the
// backends.
package backend

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// ResolveConfig checks the settings every backend's Config has and fills
// their defaults: the table names (TablesFor: empty means DefaultTable), the
// enqueue limits (validated, then defaults for zero fields) and the logger
// (slog.Default() when nil).
func ResolveConfig(table string, limits outbox.Limits, log *slog.Logger) (store.Tables, outbox.Limits, *slog.Logger, error) {
	t, err := store.TablesFor(table)
	if err != nil {
		return store.Tables{}, limits, nil, err
	}
	if err := limits.Validate(); err != nil {
		return store.Tables{}, limits, nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return t, limits.WithDefaults(), log, nil
}

// WrapError adds the operation op to err; nil stays nil. missing is empty
// unless the backend found that err means a table does not exist; it then
// names what is missing (for example `table "outbox_events"`), and the
// error tells to run `outbox migrate` first.
func WrapError(op string, err error, missing string) error {
	if err == nil {
		return nil
	}
	if missing != "" {
		return fmt.Errorf("%s: %s does not exist: run `outbox migrate` first: %w", op, missing, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// LeaseLost is appended to the audit error of an attempt whose row was no
// longer PROCESSING under its claim token when Complete came (fenced).
const LeaseLost = "lease lost before the mark: the row was not changed"

// Refused wraps err with ErrRefused; nil stays nil.
func Refused(err error) error {
	if err == nil || errors.Is(err, store.ErrRefused) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrRefused, err)
}

// EventNotFound returns the outbox.ErrNotFound error for an event id that
// names no row.
func EventNotFound(id outbox.EventID) error {
	return fmt.Errorf("%w: %s", outbox.ErrNotFound, id)
}
