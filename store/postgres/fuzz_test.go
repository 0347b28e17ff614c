package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/store/storetest"
)

// FuzzOutcomeText completes a claimed event with a fuzzed error text and
// checks that the outcome is recorded, whatever the text holds (see
// storetest.FuzzOutcome). Its seeds are in testdata/fuzz/FuzzOutcomeText.
func FuzzOutcomeText(f *testing.F) {
	dropStaleFuzzTables(f)
	storetest.FuzzOutcome(f, newHarnessOn(f, storetest.FuzzTable()))
}

// dropStaleFuzzTables drops the tables of fuzz workers that were stopped
// before their cleanup (storetest.DropStaleFuzzTables).
func dropStaleFuzzTables(t testing.TB) {
	ctx := context.Background()
	pool := newPool(t)
	rows, err := pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename ~ '^fuzz_[0-9]+_[0-9]+$'`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	storetest.DropStaleFuzzTables(t, names, func(name string) error {
		_, err := pool.Exec(ctx, pgtest.DropTables(name))
		return err
	})
}
