// Package e2etest is the end-to-end harness of the CLI's tests: it builds
// the real `outbox` CLI, fills a PostgreSQL outbox table of its own, runs
// `outbox relay --drain` (or a long-running relay) into a broker and checks
// what a consumer of the test reads back, and what the route breakers did
// during a broker outage. A test file keeps only the broker, its consumer
// (which converts what it reads into []sinktest.Received) and the broker
// restart. It needs PostgreSQL; the sink conformance suite
// (sink/sinktest) does not.
package e2etest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/sink/sinktest"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/storetest"
)

var cli struct {
	once sync.Once
	path string
	err  error
}

// BuildCLI builds ./cmd/outbox of the module under test once per test
// binary and returns the binary's path. One test process at a time
// builds, and every test process of a checkout shares the binary: it is
// kept between runs in a directory of the system's temporary directory
// named after the checkout and the build's flags, where `go build`
// relinks it only when the code changed, instead of once per package.
func BuildCLI(t testing.TB) string {
	t.Helper()
	cli.once.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			cli.err = fmt.Errorf("go env GOMOD: %v", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		// The CLI is built as the tests are: with the race detector when
		// they have it, so that its dependencies are the builds the tests
		// already compiled (without it, every dependency is compiled a
		// second time), and the CLI's own races are caught in the
		// end-to-end tests too. The SQLite engine is built without it, as
		// the README's test command builds it, or this build would compile
		// that package a second time. No debugging information (-w): a
		// third less work for the linker, and a panic's or a race's
		// report does not need it.
		args := []string{"build", "-ldflags=-w"}
		if testenv.Race {
			args = append(args, "-race", "-gcflags=modernc.org/sqlite/lib=-race=false")
		}
		key := sha256.Sum256([]byte(root + "\x00" + strings.Join(args, " ")))
		dir := filepath.Join(os.TempDir(), "outbox-test-cli-"+hex.EncodeToString(key[:8]))
		if cli.err = os.MkdirAll(dir, 0o700); cli.err != nil {
			return
		}
		cli.path = filepath.Join(dir, "outbox")
		build := exec.Command("go", append(args, "-o", cli.path, "./cmd/outbox")...)
		build.Dir = root
		// Test processes that start at once (go test -p N) would each
		// compile the whole tree into the shared build cache in parallel;
		// under the lock the first builds and the others find the binary
		// up to date.
		release := testenv.MachineLock("outbox-test-cli-build.lock")
		out, err = build.CombinedOutput()
		release()
		if err != nil {
			cli.err = fmt.Errorf("go build ./cmd/outbox: %v\n%s", err, out)
		}
	})
	if cli.err != nil {
		t.Fatal(cli.err)
	}
	return cli.path
}

// RunCLI runs `outbox args...` with stdin, waits at most five minutes for
// it (the first call's build of the CLI not counted), and fails the test
// unless it exits 0. It returns what the command printed on stdout.
func RunCLI(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	path := BuildCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("outbox %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, tail(stdout.String()), tail(stderr.String()))
	}
	return stdout.String()
}

// tail keeps the end of a long log for a failure message.
func tail(s string) string {
	const n = 8000
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// Process is an `outbox` subprocess started by StartCLI.
type Process struct {
	args string
	cmd  *exec.Cmd
	log  testenv.Buffer
	done chan struct{}
	err  error // set before done is closed
}

// StartCLI starts `outbox args...` with its stdout and stderr going to a
// buffer that Log reads while it runs. The process is killed, if it still
// runs, when the test ends.
func StartCLI(t testing.TB, args ...string) *Process {
	t.Helper()
	p := &Process{args: strings.Join(args, " "), done: make(chan struct{})}
	p.cmd = exec.Command(BuildCLI(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("outbox %s: %v", p.args, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// Kill SIGKILLs the process (the crash a test wants) and waits until it
// has exited.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Log returns everything the process printed so far.
func (p *Process) Log() string { return p.log.String() }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit error (nil for exit 0) once Exited.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Await calls cond every interval until it returns true. It fails the
// test if the process exits or ctx ends first; what says what was awaited.
// cond runs on the calling goroutine, so it may fail the test itself.
func (p *Process) Await(ctx context.Context, t testing.TB, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-p.done:
			t.Fatalf("outbox %s exited (%v) before %s:\n%s", p.args, p.err, what, tail(p.Log()))
		case <-ctx.Done():
			t.Fatalf("outbox %s: gave up waiting for %s (%v):\n%s", p.args, what, ctx.Err(), tail(p.Log()))
		case <-tick.C:
		}
	}
}

// Wait waits for the process to exit, and fails the test unless it exits
// 0 before ctx ends (the process is then killed). It logs the lines of the
// process's log that report "relay finished".
func (p *Process) Wait(ctx context.Context, t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("outbox %s: %v\n%s", p.args, p.err, tail(p.Log()))
		}
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		t.Fatalf("outbox %s did not finish (%v):\n%s", p.args, ctx.Err(), tail(p.Log()))
	}
	for _, line := range strings.Split(p.Log(), "\n") { // not an iterator: its body would hide the caller's line
		if strings.Contains(line, "relay finished") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

// EventType is the event type of every event a Backlog enqueues.
const EventType = "Tested"

// Enqueued is one event of a Backlog as a consumer should see it.
type Enqueued struct {
	Aggregate string // aggregate_type/aggregate_id
	Seq       int    // its position among the events of its aggregate, from 0
}

// Backlog is a migrated outbox table of its own in PostgreSQL holding the
// events NewBacklog enqueued.
type Backlog struct {
	DSN, Table string
	// Events are the enqueued events by event id.
	Events map[string]Enqueued
}

// Aggregates returns payment aggregates payment/tx-0.. and merchant
// aggregates merchant/m-0.., as type/id.
func Aggregates(payments, merchants int) []string {
	var aggs []string
	for i := range payments {
		aggs = append(aggs, fmt.Sprintf("payment/tx-%d", i))
	}
	for i := range merchants {
		aggs = append(aggs, fmt.Sprintf("merchant/m-%d", i))
	}
	return aggs
}

// DefaultAggregates returns 12 payment and 4 merchant aggregates.
func DefaultAggregates() []string { return Aggregates(12, 4) }

// NewBacklog migrates a table named after prefix (storetest.TableName) in
// the test PostgreSQL (testenv.Postgres) with the CLI and enqueues n
// events round-robin over aggregates (type/id), each payload carrying the
// event's aggregate and its per-aggregate sequence. The tables are dropped
// when the test ends, pass or fail.
func NewBacklog(t testing.TB, prefix string, n int, aggregates []string) *Backlog {
	t.Helper()
	b := &Backlog{DSN: testenv.Postgres.Addr(t), Table: storetest.TableName(prefix)}
	RunCLI(t, "", "migrate", "--db", b.DSN, "--table", b.Table)
	t.Cleanup(func() { b.drop(t) })
	var lines strings.Builder
	order := make([]Enqueued, 0, n)
	next := map[string]int{}
	for i := range n {
		agg := aggregates[i%len(aggregates)]
		typ, id, _ := strings.Cut(agg, "/")
		fmt.Fprintf(&lines, `{"aggregate_type":%q,"aggregate_id":%q,"event_type":%q,"payload":{"agg":%q,"seq":%d,"amount":1000}}`+"\n",
			typ, id, EventType, agg, next[agg])
		order = append(order, Enqueued{agg, next[agg]})
		next[agg]++
	}
	ids := strings.Fields(RunCLI(t, lines.String(), "enqueue", "--db", b.DSN, "--table", b.Table))
	if len(ids) != n {
		t.Fatalf("enqueue printed %d ids for %d events", len(ids), n)
	}
	b.Events = make(map[string]Enqueued, n)
	for i, id := range ids {
		b.Events[id] = order[i]
	}
	return b
}

// drop drops the backlog's tables, also when the test failed (its log
// says what was in them), so that the shared database does not fill up.
func (b *Backlog) drop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.DSN)
	if err != nil {
		t.Errorf("drop %s: %v", b.Table, err)
		return
	}
	defer conn.Close(ctx)
	if t.Failed() {
		var counts []string
		rows, err := conn.Query(ctx, "SELECT status, count(*) FROM "+pgx.Identifier{b.Table}.Sanitize()+" GROUP BY status ORDER BY status")
		if err == nil {
			for rows.Next() {
				var st string
				var n int64
				if rows.Scan(&st, &n) == nil {
					counts = append(counts, fmt.Sprintf("%s=%d", st, n))
				}
			}
			rows.Close()
		}
		t.Logf("table %s held %s when the test failed", b.Table, strings.Join(counts, " "))
	}
	if _, err := conn.Exec(ctx, pgtest.DropTables(b.Table)); err != nil {
		t.Errorf("drop %s: %v", b.Table, err)
	}
}

// RelayArgs returns the arguments of `outbox relay --drain` from the
// backlog's table into sinkURL, polling every 20ms, without progress logs;
// extra flags follow (a repeated flag overrides an earlier one).
func (b *Backlog) RelayArgs(sinkURL string, extra ...string) []string {
	return append([]string{"relay", "--drain", "--db", b.DSN, "--table", b.Table, "--sink", sinkURL,
		"--poll-interval", "20ms", "--progress", "0"}, extra...)
}

// Processed returns the number of the backlog's events in state PROCESSED
// (`outbox status --json`).
func (b *Backlog) Processed(t testing.TB) int {
	t.Helper()
	out := RunCLI(t, "", "status", "--json", "--db", b.DSN, "--table", b.Table)
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json printed %q: %v", out, err)
	}
	n, _ := st["PROCESSED"].(float64)
	return int(n)
}

// breakerReleased matches the audit rows of publishes that failed and were
// given back by an open circuit breaker.
const breakerReleased = "(outcome = 'RELEASED' AND error LIKE '%circuit breaker open%')"

// Outcomes counts the backlog's audit rows by outcome (DELIVERED, RETRY,
// RELEASED, ...), and how many events have a RETRY row and ended PROCESSED:
// they failed to publish at least once and were delivered later. A publish
// that failed while the route's circuit breaker opened is recorded as a
// RELEASED attempt (no retry counted) whose error says "circuit breaker
// open"; Outcomes counts those as RETRY too, since for these tests both
// are a publish that failed while the broker was down.
func (b *Backlog) Outcomes(t testing.TB) (byOutcome map[string]int, retriedThenDelivered int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.DSN)
	if err != nil {
		t.Fatalf("outcomes of %s: %v", b.Table, err)
	}
	defer conn.Close(ctx)
	names, err := store.TablesFor(b.Table)
	if err != nil {
		t.Fatal(err)
	}
	attempts, outbox := pgx.Identifier{names.Attempts}.Sanitize(), pgx.Identifier{names.Outbox}.Sanitize()
	rows, err := conn.Query(ctx, "SELECT CASE WHEN "+breakerReleased+" THEN 'RETRY' ELSE outcome END, count(*) FROM "+attempts+" GROUP BY 1")
	if err != nil {
		t.Fatalf("outcomes of %s: %v", b.Table, err)
	}
	byOutcome = map[string]int{}
	for rows.Next() {
		var o string
		var n int
		if err := rows.Scan(&o, &n); err != nil {
			t.Fatal(err)
		}
		byOutcome[o] = n
	}
	if rows.Close(); rows.Err() != nil {
		t.Fatalf("outcomes of %s: %v", b.Table, rows.Err())
	}
	err = conn.QueryRow(ctx, "SELECT count(*) FROM "+outbox+" o WHERE o.status = 'PROCESSED' AND EXISTS (SELECT 1 FROM "+
		attempts+" a WHERE a.event_id = o.event_id AND (a.outcome = 'RETRY' OR "+breakerReleased+"))").Scan(&retriedThenDelivered)
	if err != nil {
		t.Fatalf("retried events of %s: %v", b.Table, err)
	}
	return byOutcome, retriedThenDelivered
}

// CheckArrived asserts that every event of b arrived in got, and nothing
// else: each with its event id, its own payload, the aggregate headers and
// event type it was enqueued with, at destOf(its aggregate type), and in
// order per aggregate once repeats (by event id) are dropped. It returns
// the number of repeats.
func CheckArrived(t testing.TB, got []sinktest.Received, b *Backlog, destOf func(aggType string) string) (duplicates int) {
	t.Helper()
	seen := map[string]bool{}
	next := map[string]int{}
	for _, r := range got {
		if r.EventID == "" {
			t.Fatalf("a message without an event id arrived on %s: %s", r.Destination, r.Payload)
		}
		w, ok := b.Events[r.EventID]
		if !ok {
			t.Fatalf("event %s arrived but was never enqueued", r.EventID)
		}
		if seen[r.EventID] {
			duplicates++
			continue
		}
		seen[r.EventID] = true
		var p struct {
			Agg string
			Seq int
		}
		if err := json.Unmarshal(r.Payload, &p); err != nil || p.Agg != w.Aggregate || p.Seq != w.Seq {
			t.Fatalf("event %s arrived with payload %s, want aggregate %s seq %d", r.EventID, r.Payload, w.Aggregate, w.Seq)
		}
		if r.AggregateType+"/"+r.AggregateID != w.Aggregate {
			t.Fatalf("event %s arrived with aggregate headers %s/%s, want %s", r.EventID, r.AggregateType, r.AggregateID, w.Aggregate)
		}
		if r.EventType != EventType {
			t.Fatalf("event %s arrived with event type %q, want %q", r.EventID, r.EventType, EventType)
		}
		if dest := destOf(r.AggregateType); r.Destination != dest {
			t.Fatalf("event %s of %s arrived on %s, want %s", r.EventID, w.Aggregate, r.Destination, dest)
		}
		if w.Seq != next[w.Aggregate] {
			t.Fatalf("aggregate %s: seq %d arrived when %d was expected (order broken)", w.Aggregate, w.Seq, next[w.Aggregate])
		}
		next[w.Aggregate]++
	}
	if len(seen) != len(b.Events) {
		t.Fatalf("%d distinct events arrived, want %d (lost %d)", len(seen), len(b.Events), len(b.Events)-len(seen))
	}
	return duplicates
}
