package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/adoptsql"
)

// outboxColumns are the columns migration 00001 gives the outbox table.
var outboxColumns = []string{"id", "event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers",
	"status", "retry_count", "created_at", "processed_at", "available_at", "expires_at", "locked_until", "lock_token", "last_error"}

var _ store.SchemaManager = (*Store)(nil)

// columnsOf returns whether the table exists and its columns.
func (s *Store) columnsOf(ctx context.Context, name string) (bool, []string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, name)
	if err != nil {
		return false, nil, fmt.Errorf("read the columns of %s: %w", name, err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return false, nil, fmt.Errorf("read the columns of %s: %w", name, err)
		}
		cols = append(cols, strings.ToLower(c))
	}
	if err := rows.Err(); err != nil {
		return false, nil, fmt.Errorf("read the columns of %s: %w", name, err)
	}
	return len(cols) > 0, cols, nil
}

// InspectSchema reads the outbox table's shape and versions, and counts
// its unfinished events; it changes nothing.
func (s *Store) InspectSchema(ctx context.Context) (store.Schema, error) {
	return s.inspect(ctx, true)
}

func (s *Store) inspect(ctx context.Context, countUnfinished bool) (store.Schema, error) {
	sc := store.Schema{Table: s.t.Outbox}
	exists, cols, err := s.columnsOf(ctx, s.t.Outbox)
	if err != nil {
		return sc, err
	}
	sc.Exists = exists
	if exists {
		sc.Missing = adoptsql.MissingColumns(outboxColumns, cols)
	}
	if sc.Current, sc.Latest, err = s.MigrationVersion(ctx); err != nil {
		return sc, err
	}
	if countUnfinished && exists && !sc.Foreign() {
		if err := s.db.QueryRowContext(ctx, s.q.countUnfinished).Scan(&sc.Unfinished); err != nil {
			return sc, fmt.Errorf("count unfinished events in %s: %w", s.t.Outbox, err)
		}
	}
	return sc, nil
}

func (s *Store) guardUp(ctx context.Context) error {
	sc, err := s.inspect(ctx, false)
	if err != nil {
		return err
	}
	if sc.Foreign() {
		return fmt.Errorf("%w: table %s exists but lacks the outbox columns %s; outbox will not take over or drop a table it did not create. "+
			"Adoption in place is supported on PostgreSQL and MySQL/MariaDB; on SQLite, use another --table and copy the rows into it with INSERT ... SELECT",
			store.ErrForeignTable, s.t.Outbox, strings.Join(sc.Missing, ", "))
	}
	return nil
}

// PlanMigrateUp returns the SQL MigrateUp would run; it changes nothing.
func (s *Store) PlanMigrateUp(ctx context.Context) ([]string, error) {
	if err := s.guardUp(ctx); err != nil {
		return nil, err
	}
	r, err := s.migrator()
	if err != nil {
		return nil, err
	}
	return adoptsql.PlanSQL(r.PlanUp(ctx))
}

// PlanMigrateDown returns the SQL MigrateDown would run; it changes nothing.
func (s *Store) PlanMigrateDown(ctx context.Context) ([]string, error) {
	if err := s.guardDown(ctx); err != nil {
		return nil, err
	}
	r, err := s.migrator()
	if err != nil {
		return nil, err
	}
	return adoptsql.PlanSQL(r.PlanDownTo(ctx, 0))
}

func (s *Store) guardDown(ctx context.Context) error {
	sc, err := s.InspectSchema(ctx)
	if err != nil {
		return err
	}
	if sc.Foreign() {
		return adoptsql.ForeignDown(s.t.Outbox, sc.Missing)
	}
	return nil
}

// Adopt is not supported on SQLite: adding the outbox's constraints to an
// existing table means rebuilding it there.
func (s *Store) Adopt(ctx context.Context, o store.AdoptOptions) (store.AdoptResult, error) {
	return store.AdoptResult{}, fmt.Errorf("%w: adoption of an existing table is supported on PostgreSQL and MySQL/MariaDB, not on SQLite: "+
		"create the outbox under another --table with outbox migrate and copy the rows into it with INSERT ... SELECT; nothing was changed",
		store.ErrForeignTable)
}
