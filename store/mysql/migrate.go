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
