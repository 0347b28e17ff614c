package mysql_test

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
	db := openDB(t)
	rows, err := db.QueryContext(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = DATABASE() AND table_name REGEXP '^fuzz_[0-9]+_[0-9]+$'`)
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
		if err := storetest.DropMySQLTables(ctx, db, name); err != nil {
			t.Logf("dropping the stale fuzz table %s: %v", name, err)
		}
	}
}
