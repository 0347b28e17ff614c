package sqlite

import (
	"context"
	"fmt"

	"github.com/txoutbox/outbox/store"
)

// Adopt is not supported on SQLite: adding the outbox's constraints to an
// existing table means rebuilding it there.
func (s *Store) Adopt(ctx context.Context, o store.AdoptOptions) (store.AdoptResult, error) {
	return store.AdoptResult{}, fmt.Errorf("%w: adoption of an existing table is supported on PostgreSQL and MySQL/MariaDB, not on SQLite: "+
		"create the outbox under another --table with outbox migrate and copy the rows into it with INSERT ... SELECT; nothing was changed",
		store.ErrForeignTable)
}
