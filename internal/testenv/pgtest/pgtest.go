// Package pgtest gives tests outside the store packages a migrated
// PostgreSQL outbox of their own on the shared server.
package pgtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/store"
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
		if _, err := pool.Exec(context.Background(), DropTables(table)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if _, err := s.MigrateUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	return pool, s
}

// DropTables returns one PostgreSQL statement that drops every
// table of the outbox named table in the current schema: the outbox
// table and every table whose name starts with table + "_" (dead
// letters, attempts, aggregates, the migration versions that a
// MigrateDown keeps, and whatever tables later migrations add), and the
// functions whose name starts with table + "_" (the trigger's). Harnesses run it at cleanup,
// also when the test failed, so that shared databases do not fill up.
// table must be a valid outbox table name (store.ValidateTable), which is
// why it may be written into the statement.
func DropTables(table string) string {
	if err := store.ValidateTable(table); err != nil {
		panic(err) // a harness's own table name: a bug in the test
	}
	return `DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT tablename FROM pg_tables
           WHERE schemaname = current_schema() AND (tablename = '` + table + `' OR starts_with(tablename, '` + table + `_'))
  LOOP EXECUTE 'DROP TABLE IF EXISTS ' || quote_ident(r.tablename) || ' CASCADE'; END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_proc p
           WHERE p.pronamespace = current_schema()::regnamespace AND starts_with(p.proname, '` + table + `_')
  LOOP EXECUTE 'DROP FUNCTION IF EXISTS ' || r.fn::text; END LOOP;
END $$`
}

// DollarPlaceholders rewrites the ? placeholders of query as $1, $2 ...
// for PostgreSQL (Harness.Bind). The suite's queries have no ? in literals.
func DollarPlaceholders(query string) string {
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}
