package inbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/txoutbox/outbox/inbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/sqlite"
)

// backend is one consumer database the tests run on.
type backend struct {
	name    string
	dialect inbox.Dialect
	db      *sql.DB
}

var backendNames = []string{"postgres", "mysql", "sqlite"}

// forEachBackend runs f as a parallel subtest on PostgreSQL, MariaDB/MySQL
// and SQLite. A service that is not reachable skips its subtest (fails
// under CI=true).
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Helper()
	for _, name := range backendNames {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, openBackend(t, name))
		})
	}
}

func openBackend(t *testing.T, name string) backend {
	t.Helper()
	var (
		b   = backend{name: name}
		err error
	)
	switch name {
	case "postgres":
		b.dialect = inbox.PostgreSQL
		b.db, err = sql.Open("pgx", testenv.Postgres.Addr(t))
	case "mysql":
		b.dialect = inbox.MySQL
		var dsn string
		if dsn, err = mysql.ConfigureDSN(testenv.MySQL.Addr(t)); err == nil {
			b.db, err = sql.Open("mysql", dsn)
		}
	case "sqlite":
		b.dialect = inbox.SQLite
		b.db, err = sql.Open("sqlite", sqlite.DSN(filepath.Join(t.TempDir(), "consumer.db")))
	}
	if err != nil {
		t.Fatal(err)
	}
	b.db.SetMaxOpenConns(16)
	t.Cleanup(func() { b.db.Close() })
	return b
}

// uniqueName returns a table name of its own for this test: prefix, a
// random suffix.
func uniqueName(prefix string) string {
	r := make([]byte, 5)
	_, _ = rand.Read(r)
	return prefix + "_" + hex.EncodeToString(r)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newInbox migrates an inbox of its own on b and drops its tables when
// the test ends. cfg.Table is set.
func newInbox(t testing.TB, b backend, cfg inbox.Config) *inbox.Inbox {
	t.Helper()
	cfg.Table = uniqueName("ib")
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	ib, err := inbox.New(b.db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ib.Dialect() != b.dialect {
		t.Fatalf("New found dialect %s for %s, want %s", ib.Dialect(), b.name, b.dialect)
	}
	ctx := context.Background()
	if _, err := ib.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropInbox(t, b, ib) })
	return ib
}

// dropInbox drops the inbox's tables, its version table included.
func dropInbox(t testing.TB, b backend, ib *inbox.Inbox) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := ib.Tables()
	for _, name := range []string{tb.Sequences, tb.Inbox, tb.Migrations} {
		if _, err := b.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+quote(b, name)); err != nil {
			t.Logf("drop %s: %v", name, err)
		}
	}
}

func quote(b backend, name string) string {
	if b.dialect == inbox.MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// effects is a business table of the test's own: one row per effect, with
// no unique key, so that a handler that ran twice leaves two rows.
type effects struct {
	b     backend
	table string
}

func newEffects(t testing.TB, b backend) *effects {
	t.Helper()
	e := &effects{b: b, table: uniqueName("effects")}
	ddl := map[inbox.Dialect]string{
		inbox.PostgreSQL: `CREATE TABLE %s (id BIGSERIAL PRIMARY KEY, event_id TEXT NOT NULL, amount BIGINT NOT NULL)`,
		inbox.MySQL:      `CREATE TABLE %s (id BIGINT AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(255) NOT NULL, amount BIGINT NOT NULL)`,
		inbox.SQLite:     `CREATE TABLE %s (id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL, amount INTEGER NOT NULL)`,
	}[b.dialect]
	if _, err := b.db.Exec(fmt.Sprintf(ddl, quote(b, e.table))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = b.db.Exec("DROP TABLE IF EXISTS " + quote(b, e.table)) })
	return e
}

// insert writes one effect in tx.
func (e *effects) insert(ctx context.Context, tx *sql.Tx, eventID string, amount int64) error {
	_, err := tx.ExecContext(ctx, e.b.rebind("INSERT INTO "+quote(e.b, e.table)+" (event_id, amount) VALUES (?, ?)"), eventID, amount)
	return err
}

// count returns the number of effects of eventID ("" for all).
func (e *effects) count(t testing.TB, eventID string) int {
	t.Helper()
	q := "SELECT count(*) FROM " + quote(e.b, e.table)
	var args []any
	if eventID != "" {
		q += e.b.rebind(" WHERE event_id = ?")
		args = append(args, eventID)
	}
	var n int
	if err := e.b.db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// rebind turns ? placeholders into $1, $2 ... on PostgreSQL.
func (b backend) rebind(q string) string {
	if b.dialect != inbox.PostgreSQL {
		return q
	}
	var out strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&out, "$%d", n)
			continue
		}
		out.WriteRune(c)
	}
	return out.String()
}

// handle runs ib.HandleMessage in a transaction of its own and commits
// it, with fn writing one effect; it returns the result.
func handle(t testing.TB, ib *inbox.Inbox, e *effects, consumer string, m inbox.Message) inbox.Result {
	t.Helper()
	ctx := context.Background()
	tx, err := e.b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	res, err := ib.HandleMessage(ctx, tx, consumer, m, func(ctx context.Context) error {
		return e.insert(ctx, tx, m.EventID, 100)
	})
	if err != nil {
		t.Fatalf("HandleMessage(%+v): %v", m, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return res
}

// recorded counts the ids the inbox holds.
func recorded(t testing.TB, b backend, ib *inbox.Inbox) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow("SELECT count(*) FROM " + quote(b, ib.Tables().Inbox)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor calls cond every few milliseconds until it returns true, and
// fails the test after timeout, naming what it waited for.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// waitBlocked waits until a statement on table is waiting for a lock
// held by another transaction, where the database can tell (PostgreSQL,
// MySQL). SQLite's busy wait cannot be observed from outside: it returns
// at once, and the test then relies only on its outcome.
func waitBlocked(t testing.TB, b backend, table string) {
	t.Helper()
	var q string
	switch b.dialect {
	case inbox.PostgreSQL:
		q = `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`
	case inbox.MySQL:
		// innodb_trx's LOCK WAIT state is not reliable on MariaDB; the test
		// runs no other statement on table while it waits here, so a
		// statement still running on it is the one that waits.
		q = `SELECT count(*) FROM information_schema.processlist
			WHERE command IN ('Query', 'Execute') AND info LIKE CONCAT('%', ?, '%') AND info NOT LIKE '%processlist%'`
	default:
		return
	}
	waitFor(t, 30*time.Second, "a statement on "+table+" waiting for a lock", func() bool {
		var n int
		if err := b.db.QueryRow(q, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
}

// ageIDs moves the recorded_at of the given ids (or of the aggregates'
// sequences, for the sequences table) back by d.
func ageRows(t testing.TB, b backend, table, column string, d time.Duration, where string, args ...any) {
	t.Helper()
	var set string
	switch b.dialect {
	case inbox.PostgreSQL:
		set = fmt.Sprintf("%s = %s - interval '%d seconds'", column, column, int(d.Seconds()))
	case inbox.MySQL:
		set = fmt.Sprintf("%s = %s - INTERVAL %d SECOND", column, column, int(d.Seconds()))
	case inbox.SQLite:
		set = fmt.Sprintf("%s = %s - %d", column, column, d.Milliseconds())
	}
	q := "UPDATE " + quote(b, table) + " SET " + set
	if where != "" {
		q += " WHERE " + b.rebind(where)
	}
	if _, err := b.db.Exec(q, args...); err != nil {
		t.Fatal(err)
	}
}
