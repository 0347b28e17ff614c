package sqlite

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/pressly/goose/v3/database"
	"github.com/txoutbox/outbox/internal/migrate"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/adoptsql"
	"github.com/txoutbox/outbox/store/internal/sqlchain"
)

// outboxColumns are the columns migration 00001 gives the outbox table.
var outboxColumns = []string{"id", "event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers",
	"status", "retry_count", "created_at", "processed_at", "available_at", "expires_at", "locked_until", "lock_token", "last_error"}

// columnsOf returns whether the table exists and its columns.
func (s *Store) columnsOf(ctx context.Context, name string) (bool, []string, error) {
	rows, err := s.db.QueryContext(ctx, s.q.columnsOf, name)
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

//go:embed migrations/*.sql
var migrationsFS embed.FS

// migrationNames is what the migrations render with.
type migrationNames struct {
	store.Tables
	sqlchain.Names
}

func (s *Store) migrator() (*migrate.Runner, error) {
	return migrate.NewFor(s.db, database.DialectSQLite3, migrationsFS, "migrations", s.t,
		migrationNames{Tables: s.t, Names: sqlchain.Names{Flavor: sqlchain.SQLite, Tables: s.t, Clock: sqlDialect.ClockMS}})
}

// MigrateUp applies the pending migrations. It refuses a table of that
// name that outbox did not create (store.ErrForeignTable).
func (s *Store) MigrateUp(ctx context.Context) ([]int64, error) {
	if err := s.guardUp(ctx); err != nil {
		return nil, err
	}
	r, err := s.migrator()
	if err != nil {
		return nil, err
	}
	var applied []int64
	err = retryBusy(ctx, func() error {
		v, err := r.Up(ctx)
		applied = append(applied, v...)
		return err
	})
	return applied, err
}

// MigrateDown drops the outbox tables; it never drops a table outbox did
// not create.
func (s *Store) MigrateDown(ctx context.Context) error {
	if err := s.guardDown(ctx); err != nil {
		return err
	}
	r, err := s.migrator()
	if err != nil {
		return err
	}
	return retryBusy(ctx, func() error { return r.Down(ctx) })
}

// MigrationVersion returns the applied and latest versions.
func (s *Store) MigrationVersion(ctx context.Context) (int64, int64, error) {
	r, err := s.migrator()
	if err != nil {
		return 0, 0, err
	}
	var cur, latest int64
	err = retryBusy(ctx, func() error {
		var err error
		cur, latest, err = r.Version(ctx)
		return err
	})
	return cur, latest, err
}
