// Package migrate runs a backend's embedded, numbered SQL migrations with
// goose, after rendering the table names into them (the templates of
// internal/sqltext, the syntax the backends' queries use too). Each outbox table has
// its own version table (<table>_schema_migrations), so several outboxes can
// live in one database.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"

	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
)

// Runner applies one backend's migrations to one outbox.
type Runner struct {
	provider *goose.Provider
	db       *sql.DB
	store    database.Store
	rendered fs.FS
	dialect  database.Dialect
	// source and dir are the migrations' unrendered texts.
	source fs.FS
	dir    string
}

// New renders every *.sql file of dir in fsys with the table names and
// prepares a goose provider on db. dialect is a goose dialect
// (database.DialectPostgres, DialectMySQL, DialectSQLite3).
func New(db *sql.DB, dialect database.Dialect, fsys fs.FS, dir string, t store.Tables) (*Runner, error) {
	return NewNamed(db, dialect, fsys, dir, t, t.Migrations, "outbox-migrate:"+t.Outbox)
}

// NewFor is New for migrations that render with names, a struct that
// embeds t and adds the backend's own fields.
func NewFor(db *sql.DB, dialect database.Dialect, fsys fs.FS, dir string, t store.Tables, names any) (*Runner, error) {
	return NewNamed(db, dialect, fsys, dir, names, t.Migrations, "outbox-migrate:"+t.Outbox)
}

// NewNamed is New for tables other than an outbox's: names is rendered
// into the migrations, versionTable keeps the applied versions, and
// lockKey (on PostgreSQL) names the advisory lock that keeps two runs
// apart.
func NewNamed(db *sql.DB, dialect database.Dialect, fsys fs.FS, dir string, names any, versionTable, lockKey string) (*Runner, error) {
	rendered, err := render(fsys, dir, names)
	if err != nil {
		return nil, err
	}
	st, err := database.NewStore(dialect, versionTable)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	opts := []goose.ProviderOption{goose.WithStore(st), goose.WithDisableGlobalRegistry(true)}
	if dialect == database.DialectPostgres {
		// A session advisory lock keeps two concurrent "outbox migrate" runs
		// from interleaving; the lock id is derived from lockKey.
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID(lockKey)))
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider(goose.DialectCustom, db, rendered, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return &Runner{provider: p, db: db, store: st, rendered: rendered, dialect: dialect, source: fsys, dir: dir}, nil
}

// Up applies pending migrations and returns the versions applied.
func (r *Runner) Up(ctx context.Context) ([]int64, error) {
	res, err := r.provider.Up(ctx)
	var applied []int64
	for _, m := range res {
		if m.Error == nil && m.Source != nil {
			applied = append(applied, m.Source.Version)
		}
	}
	if err != nil {
		return applied, fmt.Errorf("apply migrations: %w", unwrapPartial(err))
	}
	return applied, nil
}

// Down reverts every applied migration.
func (r *Runner) Down(ctx context.Context) error {
	if _, err := r.provider.DownTo(ctx, 0); err != nil {
		return fmt.Errorf("revert migrations: %w", unwrapPartial(err))
	}
	return nil
}

// Version returns the applied and the latest version. It only reads: a
// database without the version table is at version 0, and the table is not
// created.
func (r *Runner) Version(ctx context.Context) (current, latest int64, err error) {
	applied, err := r.Applied(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, v := range applied {
		current = max(current, v)
	}
	return current, r.Latest(), nil
}

func unwrapPartial(err error) error {
	var pe *goose.PartialError
	if errors.As(err, &pe) && pe.Err != nil {
		if pe.Failed != nil && pe.Failed.Source != nil {
			return fmt.Errorf("migration %d: %w", pe.Failed.Source.Version, pe.Err)
		}
		return pe.Err
	}
	return err
}

func render(fsys fs.FS, dir string, data any) (fs.FS, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	out := memFS{}
	var names []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		raw, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		tpl, err := sqltext.Parse(name, string(raw))
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		text, err := tpl.Render(data)
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		out[name] = []byte(text)
	}
	return out, nil
}

func lockID(key string) int64 {
	// FNV-1a, folded to a positive int64; the keys are salted (New uses
	// "outbox-migrate:<table>") so that they do not collide with goose's own
	// default lock id.
	var h uint64 = 14695981039346656037
	for _, c := range []byte(key) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return int64(h >> 1)
}

// UpTo applies the pending migrations up to and including version, and
// returns the versions applied. Tests use it to build an older schema.
func (r *Runner) UpTo(ctx context.Context, version int64) ([]int64, error) {
	res, err := r.provider.UpTo(ctx, version)
	var applied []int64
	for _, m := range res {
		if m.Error == nil && m.Source != nil {
			applied = append(applied, m.Source.Version)
		}
	}
	if err != nil {
		return applied, fmt.Errorf("apply migrations: %w", unwrapPartial(err))
	}
	return applied, nil
}
