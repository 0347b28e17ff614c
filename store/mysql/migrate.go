package mysql

import (
	"context"
	"embed"
	"fmt"

	"github.com/pressly/goose/v3/database"

	"github.com/txoutbox/outbox/internal/migrate"
	"github.com/txoutbox/outbox/store"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// migrationNames is what the migrations are rendered with: the table names
// and the server's flavor.
type migrationNames struct {
	store.Tables
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
		migrationNames{Tables: s.t, mariaDB: f.mariaDB}, s.t.Migrations, "outbox-migrate:"+s.t.Outbox)
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
