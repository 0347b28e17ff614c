package mysql

import (
	"context"
	"embed"
	"fmt"
	"slices"
	"strings"

	"github.com/pressly/goose/v3/database"

	"github.com/txoutbox/outbox/internal/migrate"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/adoptsql"
	"github.com/txoutbox/outbox/store/internal/sqlchain"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// migrationNames is what the migrations are rendered with: the table names
// and the server's flavor.
type migrationNames struct {
	store.Tables
	sqlchain.Names
	mariaDB bool
}

// JSONText is the type of a JSON column whose text must come back byte
// for byte (payload). MariaDB's JSON type is LONGTEXT with a JSON_VALID
// check, stored byte for byte. MySQL's JSON type is a binary document that
// reorders keys and rewrites numbers, so a payload would not come back (or
// be delivered, or match its signature) byte for byte: on MySQL the column
// is exactly what MariaDB makes of JSON. column is the column's name, a
// constant of the migration.
func (m migrationNames) JSONText(column string) string {
	if m.mariaDB {
		return "JSON NOT NULL"
	}
	return "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL CHECK (JSON_VALID(" + column + "))"
}

// LaneOf renders the lane of an aggregate whose columns are prefixed p
// (migration 00007; see laneOf).
func (m migrationNames) LaneOf(p string) string { return laneOf(p) }

// outboxIndex is one of the outbox table's keys of migration 00001,
// declared once: the migration renders each inside its CREATE TABLE
// ({{.OutboxIndex "due_idx"}}) and adoption adds those a table lacks.
type outboxIndex struct {
	// suffix follows the outbox table's name and "_" in the index's name.
	suffix  string
	unique  bool
	columns string
}

var outboxIndexes = []outboxIndex{
	{suffix: "event_id_key", unique: true, columns: "event_id"},
	{suffix: "due_idx", columns: "status, available_at, id"},
	{suffix: "aggregate_idx", columns: "aggregate_type, aggregate_id, unfinished, id"},
	{suffix: "expiry_idx", columns: "waiting_expires_at"},
}

// name is the index's name on the outbox table outbox.
func (x outboxIndex) name(outbox string) string { return outbox + "_" + x.suffix }

// OutboxIndex renders the outbox table's key named by suffix as a clause
// of CREATE TABLE: a UNIQUE constraint or an INDEX.
func (m migrationNames) OutboxIndex(suffix string) (string, error) {
	for _, x := range outboxIndexes {
		if x.suffix != suffix {
			continue
		}
		if x.unique {
			return "CONSTRAINT " + quote(x.name(m.Outbox)) + " UNIQUE (" + x.columns + ")", nil
		}
		return "INDEX " + quote(x.name(m.Outbox)) + " (" + x.columns + ")", nil
	}
	return "", fmt.Errorf("no outbox index %q", suffix)
}

func (s *Store) migrator(ctx context.Context) (*migrate.Runner, error) {
	f, err := serverFlavor(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return migrate.NewNamed(s.db, database.DialectMySQL, migrationsFS, "migrations",
		migrationNames{Tables: s.t, mariaDB: f.mariaDB,
			Names: sqlchain.Names{Flavor: sqlchain.MySQL, Tables: s.t, Clock: sqlDialect.ClockMS}}, s.t.Migrations, "outbox-migrate:"+s.t.Outbox)
}

// MigrateUp applies the pending migrations. MySQL commits each DDL
// statement by itself, so the migrations are written to be run again after
// an interruption: every step is idempotent.
//
// It refuses a table of that name that outbox did not create
// (store.ErrForeignTable): see Adopt.
func (s *Store) MigrateUp(ctx context.Context) ([]int64, error) {
	if err := s.guardUp(ctx); err != nil {
		return nil, err
	}
	r, err := s.migrator(ctx)
	if err != nil {
		return nil, err
	}
	return r.Up(ctx)
}

// MigrateDown drops the outbox tables. On an adopted table it removes only
// what adoption added, and it never drops a table outbox did not create.
func (s *Store) MigrateDown(ctx context.Context) error {
	r, err := s.migrator(ctx)
	if err != nil {
		return err
	}
	return s.migrateDown(ctx, r)
}

// MigrationVersion returns the applied and latest versions.
func (s *Store) MigrationVersion(ctx context.Context) (int64, int64, error) {
	r, err := s.migrator(ctx)
	if err != nil {
		return 0, 0, err
	}
	return r.Version(ctx)
}

// outboxColumns are the columns migration 00001 gives the outbox table.
var outboxColumns = []string{"id", "event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers",
	"status", "retry_count", "created_at", "processed_at", "available_at", "expires_at", "locked_until", "lock_token",
	"last_error", "unfinished", "waiting_expires_at"}

// columnsOf returns whether the table exists in the connection's database
// and its columns with whether each is nullable.
func (s *Store) columnsOf(ctx context.Context, name string) (bool, map[string]bool, []string, error) {
	rows, err := s.db.QueryContext(ctx, stmt("migrate.columns_of", s.t), name)
	if err != nil {
		return false, nil, nil, fmt.Errorf("read the columns of %s: %w", name, err)
	}
	defer rows.Close()
	nullable := map[string]bool{}
	var cols []string
	for rows.Next() {
		var c, n string
		if err := rows.Scan(&c, &n); err != nil {
			return false, nil, nil, fmt.Errorf("read the columns of %s: %w", name, err)
		}
		c = strings.ToLower(c)
		cols = append(cols, c)
		nullable[c] = n == "YES"
	}
	if err := rows.Err(); err != nil {
		return false, nil, nil, fmt.Errorf("read the columns of %s: %w", name, err)
	}
	return len(cols) > 0, nullable, cols, nil
}

func (s *Store) tableExists(ctx context.Context, name string) (bool, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, stmt("migrate.table_exists", s.t), name).Scan(&n); err != nil {
		return false, fmt.Errorf("look for table %s: %w", name, err)
	}
	return n > 0, nil
}

// InspectSchema reads the outbox table's shape and versions, and counts
// its unfinished events; it changes nothing.
func (s *Store) InspectSchema(ctx context.Context) (store.Schema, error) {
	return s.inspect(ctx, true)
}

func (s *Store) inspect(ctx context.Context, countUnfinished bool) (store.Schema, error) {
	sc := store.Schema{Table: s.t.Outbox}
	exists, _, cols, err := s.columnsOf(ctx, s.t.Outbox)
	if err != nil {
		return sc, err
	}
	sc.Exists = exists
	if exists {
		sc.Missing = adoptsql.MissingColumns(outboxColumns, cols)
	}
	if sc.Adopted, err = s.tableExists(ctx, adoptsql.Table(s.t)); err != nil {
		return sc, err
	}
	r, err := s.migrator(ctx)
	if err != nil {
		return sc, err
	}
	if sc.Current, sc.Latest, err = r.Version(ctx); err != nil {
		return sc, err
	}
	if countUnfinished && exists && !sc.Foreign() {
		if err := s.db.QueryRowContext(ctx, adoptSQL(s.t, "count_unfinished")).Scan(&sc.Unfinished); err != nil {
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
	r, err := s.migrator(ctx)
	if err != nil {
		return nil, err
	}
	return adoptsql.PlanSQL(r.PlanUp(ctx))
}

// PlanMigrateDown returns the SQL MigrateDown would run; it changes nothing.
func (s *Store) PlanMigrateDown(ctx context.Context) ([]string, error) {
	sc, err := s.InspectSchema(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.migrator(ctx)
	if err != nil {
		return nil, err
	}
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
		for _, q := range undo {
			if _, err := s.db.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("undo the adoption of %s: %s: %w (run it again to finish)", s.t.Outbox, adoptsql.FirstLine(q), err)
			}
		}
		return nil
	case sc.Foreign():
		return adoptsql.ForeignDown(s.t.Outbox, sc.Missing)
	}
	return r.Down(ctx)
}

// unadoptSQL removes, from what the adoption record lists and the table
// still has, only what adoption added: its sibling tables, indexes and
// columns, then the version table and the record itself. Each statement
// can run again after an interruption.
func (s *Store) unadoptSQL(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, adoptSQL(s.t, "record_read"))
	if err != nil {
		return nil, fmt.Errorf("read the adoption record of %s: %w", s.t.Outbox, err)
	}
	defer rows.Close()
	byKind := map[string][]string{}
	for rows.Next() {
		var kind, name string
		if err := rows.Scan(&kind, &name); err != nil {
			return nil, fmt.Errorf("read the adoption record of %s: %w", s.t.Outbox, err)
		}
		byKind[kind] = append(byKind[kind], name)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the adoption record of %s: %w", s.t.Outbox, err)
	}
	_, _, cols, err := s.columnsOf(ctx, s.t.Outbox)
	if err != nil {
		return nil, err
	}
	indexes, err := s.indexes(ctx)
	if err != nil {
		return nil, err
	}
	var out, alters []string
	for _, tb := range byKind["table"] {
		out = append(out, "DROP TABLE IF EXISTS "+quote(tb))
	}
	for _, ix := range byKind["index"] {
		if slices.Contains(indexes, ix) {
			alters = append(alters, "DROP INDEX "+quote(ix))
		}
	}
	// Generated columns first: they read the others.
	added := byKind["column"]
	slices.SortStableFunc(added, func(a, b string) int { return boolInt(!isGenerated(a)) - boolInt(!isGenerated(b)) })
	for _, c := range added {
		if slices.Contains(cols, c) {
			alters = append(alters, "DROP COLUMN "+quote(c))
		}
	}
	if len(alters) > 0 {
		out = append(out, adoptSQL(s.t, "alter_outbox")+"\n    "+strings.Join(alters, ",\n    "))
	}
	return append(out, adoptSQL(s.t, "drop_migrations"), adoptSQL(s.t, "drop_record")), nil
}

func isGenerated(col string) bool { return col == "unfinished" || col == "waiting_expires_at" }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
