package inbox

import (
	"context"
	"embed"
	"io/fs"

	"github.com/txoutbox/outbox/internal/migrate"
)

//go:embed migrations
var migrationsFS embed.FS

// migrator prepares the migrations of the inbox's dialect, with its table
// names rendered in, quoted. Each inbox keeps its versions in
// <table>_schema_migrations.
func (ib *Inbox) migrator() (*migrate.Runner, error) {
	dir, err := fs.Sub(migrationsFS, "migrations/"+ib.cfg.Dialect.migrationsDir())
	if err != nil {
		return nil, err
	}
	return migrate.NewNamed(ib.db, ib.cfg.Dialect.gooseDialect(), dir, ".",
		ib.tables.quoted(ib.cfg.Dialect), ib.tables.Migrations, "inbox-migrate:"+ib.tables.Inbox)
}

// MigrateUp creates the inbox tables, or brings them to the latest
// version, and returns the versions it applied. It is idempotent: run it
// at every start, or once per deployment.
func (ib *Inbox) MigrateUp(ctx context.Context) ([]int64, error) {
	r, err := ib.migrator()
	if err != nil {
		return nil, err
	}
	return r.Up(ctx)
}

// MigrateDown drops the inbox tables, and with them every recorded id.
func (ib *Inbox) MigrateDown(ctx context.Context) error {
	r, err := ib.migrator()
	if err != nil {
		return err
	}
	return r.Down(ctx)
}

// MigrationVersion returns the applied and the latest schema version. It
// creates the version table when there is none.
func (ib *Inbox) MigrationVersion(ctx context.Context) (current, latest int64, err error) {
	r, err := ib.migrator()
	if err != nil {
		return 0, 0, err
	}
	return r.Version(ctx)
}
