package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/store/storetest"
)

// TestMain lets the test binary act as the outbox command, so that tests
// can run a real relay process and SIGKILL it.
func TestMain(m *testing.M) {
	if os.Getenv("OUTBOX_TEST_EXEC_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// backendCase is one database the CLI tests run against.
type backendCase struct {
	name string
	dsn  func(t *testing.T) string
}

func backends() []backendCase {
	return []backendCase{
		{"postgres", func(t *testing.T) string { return testenv.Postgres.Addr(t) }},
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "outbox.db") }},
	}
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
