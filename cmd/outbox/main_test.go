package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/storetest"
)

// TestMain lets the test binary act as the outbox command, so that tests
// can run a real relay process and SIGKILL it.
func TestMain(m *testing.M) {
	if os.Getenv("OUTBOX_TEST_EXEC_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// backendCase is one database the CLI tests run against.
type backendCase struct {
	name string
	dsn  func(t *testing.T) string
}

func backends() []backendCase {
	return []backendCase{
		{"postgres", postgresDSN},
		{"mysql", mysqlDSN},
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "outbox.db") }},
	}
}

// postgresDSN gives the test a schema of its own in the PostgreSQL
// database (the DSN's search_path), dropped with everything in it when the
// test ends, pass or fail.
func postgresDSN(t *testing.T) string {
	dsn := testenv.Postgres.Addr(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	schema := pgx.Identifier{newTable()}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create a schema for the test: %v", err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("drop the test schema: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Errorf("drop the test schema: %v", err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", testenv.Postgres.Var, err)
	}
	q := u.Query()
	q.Set("search_path", strings.Trim(schema, `"`))
	u.RawQuery = q.Encode()
	return u.String()
}

// mysqlDSN gives the test a database of its own on the MySQL/MariaDB server,
// dropped when the test ends, so that the CLI's tables (and their
// aggregate-lock tables) do not pile up in the shared one.
func mysqlDSN(t *testing.T) string {
	dsn := testenv.MySQL.Addr(t)
	cfg, err := mysql.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.NewConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	name := newTable()
	if _, err := db.ExecContext(context.Background(), "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("create a database for the test (the %s user needs CREATE and DROP): %v", cfg.User, err)
	}
	t.Cleanup(func() {
		c, err := mysql.NewConnector(dsn)
		if err != nil {
			return
		}
		db := sql.OpenDB(c)
		defer db.Close()
		// MariaDB refuses to drop a database whose directory still holds
		// a file it does not own (error 1010, "Directory not empty"), such
		// as the temporary file of a table copy another session is ending;
		// the drop is tried again until it goes. A database left behind is
		// logged, not failed: the product never drops databases, and its
		// name is this test's own.
		deadline := time.Now().Add(30 * time.Second)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			_, err := db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`")
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Logf("left the test database %s behind: %v", name, err)
				return
			}
			<-tick.C
		}
	})
	u := url.URL{Scheme: "mysql", User: url.User(cfg.User), Host: cfg.Addr, Path: "/" + name}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	}
	return u.String()
}

// cli runs the command in-process and returns stdout, stderr and the exit code.
func cli(t testing.TB, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), code
}

// mustCLI runs the command and fails the test unless it exits 0.
func mustCLI(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	out, errOut, code := cli(t, stdin, args...)
	if code != 0 {
		t.Fatalf("outbox %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func statusJSON(t testing.TB, dsn, table string) map[string]any {
	t.Helper()
	out := mustCLI(t, "", "status", "--db", dsn, "--table", table, "--json")
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("status --json printed %q: %v", out, err)
	}
	return m
}

func count(m map[string]any, key string) int {
	v, _ := m[key].(float64)
	return int(v)
}

// eventLines returns n JSON event lines over aggs aggregates; each payload
// carries its per-aggregate sequence number.
func eventLines(n, aggs int, ttl string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		agg := i % aggs
		extra := ""
		if ttl != "" {
			extra = fmt.Sprintf(`,"ttl":%q`, ttl)
		}
		fmt.Fprintf(&b, `{"aggregate_type":"payment","aggregate_id":"tx-%d","event_type":"ApprovalRequested","payload":{"agg":%d,"seq":%d}%s}`+"\n",
			agg, agg, i/aggs, extra)
	}
	return b.String()
}

func newTable() string { return storetest.TableName("cli") }

// TestCLIMySQLSecretsNeverPrinted: MySQL DSNs in both forms (the driver's
// user:pass@tcp(host)/db form is not a URL the CLI's redaction parses),
// refused, malformed or with a wrong password, never print the password.
func TestCLIMySQLSecretsNeverPrinted(t *testing.T) {
	const pw = "Sup3rSecretPw"
	cases := [][]string{
		{"status", "--db", "mysql://app:" + pw + "@127.0.0.1:1/db"},
		{"status", "--db", "app:" + pw + "@tcp(127.0.0.1:1)/db"},
		{"status", "--db", "mysql://app:" + pw + "@[bad"},
		{"status", "--db", "app:" + pw + "@tcp(127.0.0.1:1/db"},
		{"relay", "--db", "app:" + pw + "@tcp(127.0.0.1:1)/db?timeout=1s", "--sink", "discard://", "--drain", "--start-wait", "1s"},
	}
	if cfg, err := mysql.ParseConfig(os.Getenv(testenv.MySQL.Var)); err == nil || os.Getenv(testenv.MySQL.Var) == "" {
		addr := "127.0.0.1:3306"
		if err == nil {
			addr = cfg.Addr
		}
		cases = append(cases, []string{"status", "--db", "nosuchuser:" + pw + "@tcp(" + addr + ")/test"})
	}
	for _, args := range cases {
		out, errOut, code := cli(t, "", args...)
		if code == 0 {
			t.Errorf("outbox %s succeeded; want an error", args[0])
		}
		if strings.Contains(out+errOut, pw) {
			t.Errorf("outbox %s printed the password:\n%s%s", args[0], out, errOut)
		}
		if strings.TrimSpace(errOut) == "" {
			t.Errorf("outbox %s: no error message", args[0])
		}
	}
}
