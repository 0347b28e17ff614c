package binlog_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store/mysql"
)

// binlogServerArgs are the options of a server a Reader can read.
var binlogServerArgs = []string{"--log-bin=mysql-bin", "--binlog-format=ROW", "--binlog-row-image=FULL", "--server-id=7"}

// openDB opens a pool on dsn, closed when t ends.
func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	connector, err := mysql.NewConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { db.Close() })
	return db
}

// testContext is a context that ends with a deadline well inside the
// test's.
func testContext(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustExec(t testing.TB, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(testContext(t, time.Minute), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}
