// Package pgtest gives tests outside the store packages a migrated
// PostgreSQL outbox of their own on the shared server.
package pgtest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// Outbox opens a pool (testenv.PostgresPool) and a store on a new table
// named with prefix (storetest.TableName), migrated up, whose tables are
// dropped at the end of the test, also when it fails. The store logs
// nowhere.
func Outbox(t testing.TB, prefix string) (*pgxpool.Pool, *postgres.Store) {
	t.Helper()
	pool := testenv.PostgresPool(t)
	table := storetest.TableName(prefix)
	s, err := postgres.New(pool, postgres.Config{Table: table, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), storetest.DropPostgresTables(table)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if _, err := s.MigrateUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	return pool, s
}
