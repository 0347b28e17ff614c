package mysql_test

import (
	"context"
	"testing"

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
	db := openDB(t)
	rows, err := db.QueryContext(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = DATABASE() AND table_name REGEXP '^fuzz_[0-9]+_[0-9]+$'`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	rows.Close()
	storetest.DropStaleFuzzTables(t, names, func(name string) error {
		return storetest.DropMySQLTables(ctx, db, name)
	})
}
