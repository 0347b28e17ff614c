package metrics_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/sqlite"
	"github.com/txoutbox/outbox/store/storetest"
)

// backend is one migrated outbox table on a real database, dropped when
// the test ends.
type backend struct {
	store store.Store
	// enqueue writes events in one committed transaction.
	enqueue func(t testing.TB, events ...outbox.Event)
	// another opens a second Store on the same table, as another process
	// would.
	another func(t testing.TB) store.Store
}

// backendKinds are the databases every counter test runs on.
var backendKinds = []string{"sqlite", "postgres", "mariadb"}

func openBackend(t testing.TB, kind string) *backend {
	t.Helper()
	ctx := context.Background()
	table := storetest.TableName("obs")
	switch kind {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "outbox.db")
		s, err := sqlite.Open(ctx, "sqlite://"+path, sqlite.Config{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		migrate(t, s, nil)
		return &backend{store: s, enqueue: sqlEnqueue(s.DB(), s.Enqueue), another: func(t testing.TB) store.Store {
			s2, err := sqlite.New(s.DB(), sqlite.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			return s2
		}}
	case "postgres":
		newStore := func(t testing.TB) *postgres.Store {
			cfg, err := pgxpool.ParseConfig(testenv.Postgres.Addr(t))
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 6
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			s, err := postgres.New(pool, postgres.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		s := newStore(t)
		migrate(t, s, func(q string) error { _, err := s.Pool().Exec(ctx, q); return err })
		return &backend{store: s, enqueue: func(t testing.TB, events ...outbox.Event) {
			t.Helper()
			tx, err := s.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := s.Enqueue(ctx, tx, events...); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}, another: func(t testing.TB) store.Store { return newStore(t) }}
	case "mariadb":
		newStore := func(t testing.TB) *mysql.Store {
			c, err := mysql.NewConnector(testenv.MySQL.Addr(t))
			if err != nil {
				t.Fatal(err)
			}
			db := sql.OpenDB(c)
			db.SetMaxOpenConns(8)
			t.Cleanup(func() { db.Close() })
			s, err := mysql.New(db, mysql.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		s := newStore(t)
		migrate(t, s, func(q string) error { _, err := s.DB().ExecContext(ctx, q); return err })
		return &backend{store: s, enqueue: sqlEnqueue(s.DB(), s.Enqueue), another: func(t testing.TB) store.Store { return newStore(t) }}
	}
	t.Fatalf("unknown backend %q", kind)
	return nil
}

// migrate creates the tables and drops them (and the migration table,
// through exec) when the test ends.
func migrate(t testing.TB, s store.Store, exec func(string) error) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.MigrateDown(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if exec != nil {
			tables, _ := store.TablesFor(s.Table())
			if err := exec("DROP TABLE IF EXISTS " + tables.Migrations); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
}

func sqlEnqueue(db *sql.DB, enqueue func(context.Context, *sql.Tx, ...outbox.Event) ([]outbox.EventID, error)) func(testing.TB, ...outbox.Event) {
	return func(t testing.TB, events ...outbox.Event) {
		t.Helper()
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := enqueue(ctx, tx, events...); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}
