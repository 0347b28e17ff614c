package store

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/txoutbox/outbox"
)

// ResolveConfig checks the settings every backend's Config has and fills
// their defaults: the table names (TablesFor: empty means DefaultTable), the
// enqueue limits (validated, then defaults for zero fields) and the logger
// (slog.Default() when nil).
func ResolveConfig(table string, limits outbox.Limits, log *slog.Logger) (Tables, outbox.Limits, *slog.Logger, error) {
	t, err := TablesFor(table)
	if err != nil {
		return Tables{}, limits, nil, err
	}
	if err := limits.Validate(); err != nil {
		return Tables{}, limits, nil, err
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

// MaxErrorRunes bounds the error texts a backend stores (last_error, the
// audit rows' error, dead-letter reasons where the backend bounds them), as
// PostgreSQL's left(err, 2000) does.
const MaxErrorRunes = 2000

// LeaseLost is appended to the audit error of an attempt whose row was no
// longer PROCESSING under its claim token when Complete came (fenced).
const LeaseLost = "lease lost before the mark: the row was not changed"

// TruncateRunes keeps the first n characters of s, as PostgreSQL's left()
// does; the other backends bound error texts and relay names with it.
func TruncateRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}

// ErrRefused marks an error of Complete (or another write) that the
// database gave because of the data it was asked to store: a text it
// cannot hold, a value over a column's limit, a constraint. Unlike a lost
// connection, retrying the same write cannot succeed. Backends wrap such
// errors with Refused; a custom Store may do the same. The relay records
// the other outcomes of a batch whose Complete is refused and ends the
// offending event FAILED, rather than leaving the batch to be sent again.
var ErrRefused = errors.New("the database refused the data")

// Refused wraps err with ErrRefused; nil stays nil.
func Refused(err error) error {
	if err == nil || errors.Is(err, ErrRefused) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrRefused, err)
}
