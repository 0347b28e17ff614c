package postgres_test

import (
	"context"
	"testing"
	"time"

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
// before their cleanup (storetest.StaleFuzzTable).
func dropStaleFuzzTables(t testing.TB) {
	ctx := context.Background()
	pool := newPool(t)
	rows, err := pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename ~ '^fuzz_[0-9]+_[0-9]+$'`)
	if err != nil {
		t.Fatal(err)
	}
	var stale []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		if storetest.StaleFuzzTable(name, time.Now()) {
			stale = append(stale, name)
		}
	}
	rows.Close()
	for _, name := range stale {
		if _, err := pool.Exec(ctx, storetest.DropPostgresTables(name)); err != nil {
			t.Logf("dropping the stale fuzz table %s: %v", name, err)
		}
	}
}
