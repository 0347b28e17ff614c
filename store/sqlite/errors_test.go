package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
)

// The store reads SQLite's own errors by their result code; "no such
// table" and "no transaction is active" share the generic SQLITE_ERROR,
// and only the engine's errors are read for their reason.
func TestErrorClassification(t *testing.T) {
	db, err := sql.Open(DriverName, ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	_, missing := db.ExecContext(ctx, `SELECT 1 FROM "no_such_outbox"`)
	_, rollback := db.ExecContext(ctx, "ROLLBACK")
	if missing == nil || rollback == nil {
		t.Fatalf("errors = %v, %v; want both", missing, rollback)
	}
	if !isGenericError(fmt.Errorf("list events: %w", missing), "no such table") {
		t.Errorf("%v: not read as a missing table", missing)
	}
	if !isGenericError(rollback, "no transaction is active") {
		t.Errorf("%v: not read as no transaction", rollback)
	}
	if isGenericError(fmt.Errorf("no such table: outbox"), "no such table") {
		t.Error("an error that is not SQLite's was read by its text")
	}
	if isBusy(missing) || isBusy(fmt.Errorf("database is locked")) {
		t.Error("an error that is not SQLITE_BUSY or SQLITE_LOCKED was read as busy")
	}
}
