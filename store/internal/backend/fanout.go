package backend

import (
	"fmt"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// CopySource checks the source table from of a Store.CopyEvents into the
// outbox table own: a valid table name, and another table than own.
func CopySource(from, own string) error {
	if err := store.ValidateTable(from); err != nil {
		return fmt.Errorf("copy events: the source table: %w", err)
	}
	if from == own {
		return fmt.Errorf("%w: copy events: the source table %q is this store's own table: copy from the outbox table the events were written to into a destination table of another name",
			outbox.ErrInvalidConfig, from)
	}
	return nil
}

// CopyMissing names the tables a Store.CopyEvents from from into own
// needs, for WrapError when one of them does not exist.
func CopyMissing(from, own string) string {
	return fmt.Sprintf("table %q or %q", from, own)
}
