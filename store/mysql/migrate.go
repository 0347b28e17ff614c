package mysql

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"testing/fstest"

	"github.com/pressly/goose/v3/database"

	"github.com/txoutbox/outbox/internal/migrate"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// textOnMySQL matches a JSON column marked to be stored as text on MySQL.
var textOnMySQL = regexp.MustCompile(`(\w+)(\s+)JSON(\s+)NOT NULL /\*text-on-mysql\*/`)

// migrationsFor returns the migrations for the server. MariaDB's JSON type
// is LONGTEXT with a JSON_VALID check, stored byte for byte. MySQL's JSON
// type is a binary document that reorders keys and rewrites numbers, so
// a payload would not come back (or be delivered, or match its signature)
// byte for byte: on MySQL the marked columns become exactly what MariaDB
// makes of JSON.
func migrationsFor(f flavor) (fs.FS, error) {
	entries, err := fs.ReadDir(migrationsFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	out := fstest.MapFS{}
	for _, e := range entries {
		raw, err := fs.ReadFile(migrationsFS, path.Join("migrations", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		if !f.mariaDB {
			raw = textOnMySQL.ReplaceAll(raw,
				[]byte("${1}${2}LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin${3}NOT NULL CHECK (JSON_VALID(${1}))"))
		}
		out["migrations/"+e.Name()] = &fstest.MapFile{Data: raw}
	}
	return out, nil
}

func (s *Store) migrator(ctx context.Context) (*migrate.Runner, error) {
	f, err := serverFlavor(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	fsys, err := migrationsFor(f)
	if err != nil {
		return nil, err
	}
	return migrate.New(s.db, database.DialectMySQL, fsys, "migrations", s.t)
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
