package redissink_test

// End-to-end: the real `outbox` binary drains a PostgreSQL outbox into
// Redis streams, and a consumer written here reads them back.

import (
	"bytes"
	"context"
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
	"github.com/txoutbox/outbox/sink/sinktest"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/storetest"
)

var cli struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cli.dir != "" {
		os.RemoveAll(cli.dir)
	}
	os.Exit(code)
}

// cliPath builds ./cmd/outbox once per test binary and returns its path.
func cliPath(t testing.TB) string {
	t.Helper()
	cli.once.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			cli.err = fmt.Errorf("go env GOMOD: %v", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		if cli.dir, cli.err = os.MkdirTemp("", "outbox-cli-"); cli.err != nil {
			return
		}
		cli.path = filepath.Join(cli.dir, "outbox")
		build := exec.Command("go", "build", "-o", cli.path, "./cmd/outbox")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			cli.err = fmt.Errorf("go build ./cmd/outbox: %v\n%s", err, out)
		}
	})
	if cli.err != nil {
		t.Fatal(cli.err)
	}
	return cli.path
}

// runCLI runs `outbox args...` and fails the test unless it exits 0.
func runCLI(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliPath(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("outbox %s: %v\nstderr:\n%s", strings.Join(args, " "), err, tail(stderr.String(), 4000))
	}
	return stdout.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// outboxTable creates a migrated outbox table of its own in PostgreSQL
// and drops it after a test that passed.
func outboxTable(t *testing.T) (dsn, table string) {
	t.Helper()
	dsn = testenv.Postgres.Addr(t)
	table = storetest.TableName("redis_e2e")
	runCLI(t, "", "migrate", "--db", dsn, "--table", table)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept table %s for inspection", table)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Logf("drop %s: %v", table, err)
			return
		}
		defer conn.Close(ctx)
		names, _ := store.TablesFor(table)
		for _, n := range []string{names.Attempts, names.DeadLetters, names.Outbox, names.Migrations} {
			if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE"); err != nil {
				t.Logf("drop %s: %v", n, err)
			}
		}
	})
	return dsn, table
}

// sent is one enqueued event as the consumer should see it.
type sent struct {
	agg string // aggregate_type/aggregate_id
	seq int
}

// enqueueEvents enqueues n events round-robin over the aggregates
// (type/id), each payload carrying its per-aggregate sequence, and returns
// the events by event id.
func enqueueEvents(t *testing.T, dsn, table string, n int, aggs []string) map[string]sent {
	t.Helper()
	var b strings.Builder
	var order []sent
	next := map[string]int{}
	for i := 0; i < n; i++ {
		agg := aggs[i%len(aggs)]
		typ, id, _ := strings.Cut(agg, "/")
		fmt.Fprintf(&b, `{"aggregate_type":%q,"aggregate_id":%q,"event_type":"Tested","payload":{"agg":%q,"seq":%d,"amount":1000}}`+"\n",
			typ, id, agg, next[agg])
		order = append(order, sent{agg, next[agg]})
		next[agg]++
	}
	ids := strings.Fields(runCLI(t, b.String(), "enqueue", "--db", dsn, "--table", table))
	if len(ids) != n {
		t.Fatalf("enqueue printed %d ids for %d events", len(ids), n)
	}
	out := make(map[string]sent, n)
	for i, id := range ids {
		out[id] = order[i]
	}
	return out
}

// checkArrived asserts that every event arrived with its event id, at the
// topic its aggregate type routes to, in order per aggregate once repeats
// are dropped; it returns the number of repeats.
func checkArrived(t *testing.T, got []sinktest.Received, want map[string]sent, topicOf func(aggType string) string) int {
	t.Helper()
	seen := map[string]bool{}
	next := map[string]int{}
	dups := 0
	for _, r := range got {
		if r.EventID == "" {
			t.Fatalf("a record without an outbox-event-id header arrived: %s", r.Payload)
		}
		if seen[r.EventID] {
			dups++
			continue
		}
		seen[r.EventID] = true
		w, ok := want[r.EventID]
		if !ok {
			t.Fatalf("event %s arrived but was never enqueued", r.EventID)
		}
		var p struct {
			Agg string
			Seq int
		}
		if err := json.Unmarshal(r.Payload, &p); err != nil || p.Agg != w.agg || p.Seq != w.seq {
			t.Fatalf("event %s arrived with payload %s, want aggregate %s seq %d", r.EventID, r.Payload, w.agg, w.seq)
		}
		if r.AggregateType+"/"+r.AggregateID != w.agg {
			t.Fatalf("event %s arrived with aggregate headers %s/%s, want %s", r.EventID, r.AggregateType, r.AggregateID, w.agg)
		}
		if dest := topicOf(r.AggregateType); r.Destination != dest {
			t.Fatalf("event %s of %s arrived on %s, want %s", r.EventID, w.agg, r.Destination, dest)
		}
		if w.seq != next[w.agg] {
			t.Fatalf("aggregate %s: seq %d arrived when %d was expected (order broken)", w.agg, w.seq, next[w.agg])
		}
		next[w.agg]++
	}
	if len(seen) != len(want) {
		t.Fatalf("%d distinct events arrived, want %d (lost %d)", len(seen), len(want), len(want)-len(seen))
	}
	return dups
}

var e2eAggregates = func() []string {
	var aggs []string
	for i := 0; i < 12; i++ {
		aggs = append(aggs, fmt.Sprintf("payment/tx-%d", i))
	}
	for i := 0; i < 4; i++ {
		aggs = append(aggs, fmt.Sprintf("merchant/m-%d", i))
	}
	return aggs
}()

// TestEndToEnd: `outbox relay --drain` delivers 2000 events of payment and
// merchant aggregates to the shared Redis; payment events go to
// <prefix>.payment.events and merchant events to <prefix>.merchant.audit
// (--route).
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	n := 2000
	if testenv.Short() {
		n = 300
	}
	addr, db := sharedRedis(t)
	prefix := uniquePrefix(t)
	c := newClient(t, addr, db)
	dropPrefix(t, c, prefix)
	dsn, table := outboxTable(t)
	want := enqueueEvents(t, dsn, table, n, e2eAggregates)

	runCLI(t, "", "relay", "--db", dsn, "--table", table, "--drain", "--progress", "0",
		"--sink", fmt.Sprintf("redis://%s/%d?stream=%s.{aggregate_type}.events", addr, db, prefix),
		"--route", "merchant="+prefix+".merchant.audit")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := readStreams(ctx, c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	dups := checkArrived(t, got, want, func(typ string) string {
		if typ == "merchant" {
			return prefix + ".merchant.audit"
		}
		return prefix + "." + typ + ".events"
	})
	if dups != 0 {
		t.Fatalf("%d duplicates with no fault", dups)
	}
	if st := runCLI(t, "", "status", "--db", dsn, "--table", table, "--json"); !strings.Contains(st, fmt.Sprintf(`"PROCESSED":%d`, n)) {
		t.Fatalf("after the drain: %s", st)
	}
}

// TestEndToEndServerRestart kills and restarts a private redis-server
// while a relay process is draining a backlog into it, with the relay's
// writes paused (CLIENT PAUSE) at that moment so that a pipeline is in
// flight. The server appends to its AOF with fsync on every write
// (appendfsync always), so every entry it acknowledged survives the kill:
// the test can then check that nothing is lost. (A server that keeps
// nothing on disk, like the shared one, loses its streams on a restart by
// design; the conformance suite covers reconnecting to such a server.)
func TestEndToEndServerRestart(t *testing.T) {
	t.Parallel()
	n := 6000
	if testenv.Short() {
		n = 1000
	}
	srv := startServer(t, "--appendonly", "yes", "--appendfsync", "always")
	c := newClient(t, srv.addr(), 0)
	dsn, table := outboxTable(t)
	want := enqueueEvents(t, dsn, table, n, e2eAggregates)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	relay := exec.CommandContext(ctx, cliPath(t), "relay", "--db", dsn, "--table", table, "--drain",
		"--sink", "redis://"+srv.addr()+"/0?timeout=2s", "--batch", "100", "--progress", "0",
		"--max-retries", "1000", "--backoff-min", "10ms", "--backoff-max", "200ms", "--poll-interval", "50ms")
	var stderr bytes.Buffer
	relay.Stderr = &stderr
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- relay.Wait() }()

	// Wait for part of the backlog, then hold the relay's writes.
	written := func() int64 {
		a, _ := c.XLen(ctx, "payment.events").Result()
		b, _ := c.XLen(ctx, "merchant.events").Result()
		return a + b
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for written() < int64(n/10) {
		select {
		case err := <-exited:
			t.Fatalf("the relay exited (%v) before the restart:\n%s", err, tail(stderr.String(), 4000))
		case <-ctx.Done():
			t.Fatalf("the relay never wrote %d entries:\n%s", n/10, tail(stderr.String(), 4000))
		case <-tick.C:
		}
	}
	if err := c.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		t.Fatalf("the relay exited (%v) before the restart", err)
	default:
	}
	before := written()
	if before >= int64(n) {
		t.Fatalf("all %d events were written before the restart: the test restarted nothing mid-drain", n)
	}
	if err := srv.restart(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the drain failed after the server restart: %v\n%s", err, tail(stderr.String(), 4000))
		}
	case <-ctx.Done():
		_ = relay.Process.Kill()
		t.Fatalf("the drain did not finish after the server restart:\n%s", tail(stderr.String(), 4000))
	}

	got, err := readStreams(ctx, c, "")
	if err != nil {
		t.Fatal(err)
	}
	dups := checkArrived(t, got, want, func(typ string) string { return typ + ".events" })
	if dups > 2*100 {
		t.Fatalf("%d duplicates after one server restart with batches of 100: more than the work in flight", dups)
	}
	if st := runCLI(t, "", "status", "--db", dsn, "--table", table, "--json"); !strings.Contains(st, fmt.Sprintf(`"PROCESSED":%d`, n)) {
		t.Fatalf("after the drain: %s", st)
	}
	t.Logf("server killed mid-drain after %d of %d entries: 0 lost, %d duplicates", before, n, dups)
}
