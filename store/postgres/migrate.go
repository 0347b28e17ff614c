package postgres

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3/database"
	"github.com/txoutbox/outbox/internal/migrate"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/adoptsql"
	"github.com/txoutbox/outbox/store/internal/sqlchain"
)

// outboxColumns are the columns migration 00001 gives the outbox table.
var outboxColumns = []string{"id", "event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers",
	"status", "retry_count", "created_at", "processed_at", "available_at", "expires_at", "locked_until", "lock_token", "last_error"}

// relation returns whether the table exists and its columns, resolved
// through the search_path as the store's queries resolve it.
func (s *Store) relation(ctx context.Context, name string) (bool, []string, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, migrateSQL("migrate.exists"), quote(name)).Scan(&exists); err != nil {
		return false, nil, fmt.Errorf("look for table %s: %w", name, err)
	}
	if !exists {
		return false, nil, nil
	}
	rows, err := s.pool.Query(ctx, migrateSQL("migrate.columns"), quote(name))
	if err != nil {
		return false, nil, fmt.Errorf("read the columns of %s: %w", name, err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, nil, fmt.Errorf("read the columns of %s: %w", name, err)
	}
	return true, cols, nil
}

// InspectSchema reads the outbox table's shape and versions, and counts
// its unfinished events; it changes nothing.
func (s *Store) InspectSchema(ctx context.Context) (store.Schema, error) {
	return s.inspect(ctx, true)
}

func (s *Store) inspect(ctx context.Context, countUnfinished bool) (store.Schema, error) {
	sc := store.Schema{Table: s.t.Outbox}
	exists, cols, err := s.relation(ctx, s.t.Outbox)
	if err != nil {
		return sc, err
	}
	sc.Exists = exists
	if exists {
		sc.Missing = adoptsql.MissingColumns(outboxColumns, cols)
	}
	if sc.Adopted, _, err = s.relation(ctx, adoptsql.Table(s.t)); err != nil {
		return sc, err
	}
	r, done, err := s.migrator()
	if err != nil {
		return sc, err
	}
	defer done()
	if sc.Current, sc.Latest, err = r.Version(ctx); err != nil {
		return sc, err
	}
	if countUnfinished && exists && !sc.Foreign() {
		if err := s.pool.QueryRow(ctx, adoptSQL(s.t, "count_unfinished")).Scan(&sc.Unfinished); err != nil {
			return sc, fmt.Errorf("count unfinished events in %s: %w", s.t.Outbox, err)
		}
	}
	return sc, nil
}

// guardUp refuses to migrate a table that outbox did not create, and one
// whose adoption did not finish.
func (s *Store) guardUp(ctx context.Context) error {
	sc, err := s.inspect(ctx, false)
	if err != nil {
		return err
	}
	return adoptsql.CheckUp(sc)
}

// PlanMigrateUp returns the SQL MigrateUp would run; it changes nothing.
func (s *Store) PlanMigrateUp(ctx context.Context) ([]string, error) {
	if err := s.guardUp(ctx); err != nil {
		return nil, err
	}
	r, done, err := s.migrator()
	if err != nil {
		return nil, err
	}
	defer done()
	return adoptsql.PlanSQL(r.PlanUp(ctx))
}

// PlanMigrateDown returns the SQL MigrateDown would run; it changes nothing.
func (s *Store) PlanMigrateDown(ctx context.Context) ([]string, error) {
	sc, err := s.InspectSchema(ctx)
	if err != nil {
		return nil, err
	}
	r, done, err := s.migrator()
	if err != nil {
		return nil, err
	}
	defer done()
	return adoptsql.PlanDown(ctx, sc, r, s.unadoptSQL)
}

// migrateDown reverts the migrations. On an adopted table it removes only
// what adoption added; a foreign table is refused.
func (s *Store) migrateDown(ctx context.Context, r *migrate.Runner) error {
	sc, err := s.InspectSchema(ctx)
	if err != nil {
		return err
	}
	switch {
	case sc.Adopted:
		if err := r.DownTo(ctx, 1); err != nil {
			return err
		}
		undo, err := s.unadoptSQL(ctx)
		if err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for _, q := range undo {
				if _, err := tx.Exec(ctx, q); err != nil {
					return fmt.Errorf("undo the adoption of %s: %s: %w", s.t.Outbox, adoptsql.FirstLine(q), err)
				}
			}
			return nil
		})
	case sc.Foreign():
		return adoptsql.ForeignDown(s.t.Outbox, sc.Missing)
	}
	return r.Down(ctx)
}

// unadoptSQL removes, from what the adoption record lists, only what
// adoption added: its sibling tables, indexes, constraints and columns,
// then the version table and the record itself.
func (s *Store) unadoptSQL(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, adoptSQL(s.t, "record_read"))
	if err != nil {
		return nil, fmt.Errorf("read the adoption record of %s: %w", s.t.Outbox, err)
	}
	type item struct{ kind, name string }
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (item, error) {
		var it item
		return it, r.Scan(&it.kind, &it.name)
	})
	if err != nil {
		return nil, fmt.Errorf("read the adoption record of %s: %w", s.t.Outbox, err)
	}
	var out, columns []string
	for _, kind := range []string{"table", "constraint", "index", "column"} {
		for _, it := range items {
			if it.kind != kind {
				continue
			}
			switch kind {
			case "table":
				out = append(out, "DROP TABLE IF EXISTS "+quote(it.name))
			case "index":
				out = append(out, "DROP INDEX IF EXISTS "+quote(it.name))
			case "constraint":
				out = append(out, adoptSQL(s.t, "alter_outbox")+" DROP CONSTRAINT IF EXISTS "+quote(it.name))
			case "column":
				columns = append(columns, "DROP COLUMN IF EXISTS "+quote(it.name))
			}
		}
	}
	if len(columns) > 0 {
		out = append(out, adoptSQL(s.t, "alter_outbox")+" "+strings.Join(columns, ", "))
	}
	return append(out, adoptSQL(s.t, "drop_migrations"), adoptSQL(s.t, "drop_record")), nil
}

//go:embed migrations/*.sql
var migrationsFS embed.FS

// migrationNames is what the migrations render with: the tables, and
// Online, set only when adoption renders migration 00001 to build the
// outbox table's indexes without blocking its writers (CREATE INDEX
// CONCURRENTLY, which runs outside a transaction).
type migrationNames struct {
	store.Tables
	sqlchain.Names
	Online bool
}

// names returns the names the migrations render with.
func (s *Store) migrationNames(online bool) migrationNames {
	return migrationNames{Tables: s.t, Names: sqlchain.Names{Flavor: sqlchain.Postgres, Tables: s.t, Clock: sqlDialect.ClockMS},
		Online: online}
}

func (s *Store) migrator() (*migrate.Runner, func(), error) {
	db := stdlib.OpenDBFromPool(s.pool)
	r, err := migrate.NewFor(db, database.DialectPostgres, migrationsFS, "migrations", s.t, s.migrationNames(false))
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return r, func() { db.Close() }, nil
}

// MigrateUp applies the pending migrations. It refuses a table of that
// name that outbox did not create (store.ErrForeignTable): see Adopt.
func (s *Store) MigrateUp(ctx context.Context) ([]int64, error) {
	if err := s.guardUp(ctx); err != nil {
		return nil, err
	}
	// An existing (adopted, or earlier) table's sequence first: the lanes'
	// cursors need its ids in order.
	if err := s.checkIDOrder(ctx, false); err != nil {
		return nil, s.wrap("migrate", err)
	}
	r, done, err := s.migrator()
	if err != nil {
		return nil, err
	}
	defer done()
	return r.Up(ctx)
}

// MigrateDown drops the outbox tables. On an adopted table it removes only
// what adoption added, and it never drops a table outbox did not create.
func (s *Store) MigrateDown(ctx context.Context) error {
	r, done, err := s.migrator()
	if err != nil {
		return err
	}
	defer done()
	return s.migrateDown(ctx, r)
}

// MigrationVersion returns the applied and latest versions.
func (s *Store) MigrationVersion(ctx context.Context) (int64, int64, error) {
	r, done, err := s.migrator()
	if err != nil {
		return 0, 0, err
	}
	defer done()
	return r.Version(ctx)
}

// sqlstateUndefinedTable is PostgreSQL's "relation does not exist".
const sqlstateUndefinedTable = "42P01"
