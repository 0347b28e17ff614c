package kafkasink_test

// End-to-end: the real `outbox` binary drains a PostgreSQL outbox into an
// in-process Kafka (kfake), and a consumer written here reads it back.

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
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

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
	table = storetest.TableName("kafka_e2e")
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
// merchant aggregates; payment events go to payment.events (the default
// route) and merchant events to merchant.audit (--route).
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	n := 2000
	if testenv.Short() {
		n = 300
	}
	dsn, table := outboxTable(t)
	want := enqueueEvents(t, dsn, table, n, e2eAggregates)
	topics := []string{"payment.events", "merchant.events", "merchant.audit"}
	c := newCluster(t, kfake.SeedTopics(3, topics...))

	runCLI(t, "", "relay", "--db", dsn, "--table", table, "--drain", "--progress", "0",
		"--sink", "kafka://"+c.addr(), "--route", "merchant=merchant.audit")

	r := newReader(t, c.addr(), topics...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := r.read(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	dups := checkArrived(t, got, want, func(typ string) string {
		if typ == "merchant" {
			return "merchant.audit"
		}
		return typ + ".events"
	})
	if dups != 0 {
		t.Fatalf("%d duplicates with no fault", dups)
	}
	if st := runCLI(t, "", "status", "--db", dsn, "--table", table, "--json"); !strings.Contains(st, fmt.Sprintf(`"PROCESSED":%d`, n)) {
		t.Fatalf("after the drain: %s", st)
	}
}

// TestEndToEndBrokerRestart restarts the broker while a relay process is
// draining a backlog, with a produce request held in flight at the moment
// of the restart: nothing is lost, order per aggregate holds, and the drain
// completes.
func TestEndToEndBrokerRestart(t *testing.T) {
	t.Parallel()
	n := 6000
	if testenv.Short() {
		n = 1000
	}
	dsn, table := outboxTable(t)
	want := enqueueEvents(t, dsn, table, n, e2eAggregates)
	topics := []string{"payment.events", "merchant.events"}
	c := newCluster(t, kfake.SeedTopics(3, topics...))

	// Let some produce requests through, then hold the next one until the
	// broker is stopped: the relay is then mid-drain, with records in
	// flight whose outcome it cannot know.
	var produced atomic.Int64
	held := make(chan struct{})
	stop := make(chan struct{})
	k := c.kfake // c.kfake changes on restart
	k.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		if produced.Add(1) == 30 {
			close(held)
			k.SleepControl(func() { <-stop })
		}
		return nil, nil, false
	})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	relay := exec.CommandContext(ctx, cliPath(t), "relay", "--db", dsn, "--table", table, "--drain",
		"--sink", "kafka://"+c.addr()+"?produce_timeout=2s", "--batch", "100", "--progress", "0",
		"--max-retries", "1000", "--backoff-min", "10ms", "--backoff-max", "200ms", "--poll-interval", "50ms")
	var stderr bytes.Buffer
	relay.Stderr = &stderr
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- relay.Wait() }()

	select {
	case <-held:
	case err := <-exited:
		t.Fatalf("the relay exited (%v) before the broker restart:\n%s", err, tail(stderr.String(), 4000))
	case <-ctx.Done():
		t.Fatalf("the relay never produced 30 requests:\n%s", tail(stderr.String(), 4000))
	}
	close(stop)
	if err := c.restart(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the drain failed after the broker restart: %v\n%s", err, tail(stderr.String(), 4000))
		}
	case <-ctx.Done():
		_ = relay.Process.Kill()
		t.Fatalf("the drain did not finish after the broker restart:\n%s", tail(stderr.String(), 4000))
	}

	r := newReader(t, c.addr(), topics...)
	got, err := r.read(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	dups := checkArrived(t, got, want, func(typ string) string { return typ + ".events" })
	if dups > 2*100 {
		t.Fatalf("%d duplicates after one broker restart with batches of 100: more than the work in flight", dups)
	}
	if st := runCLI(t, "", "status", "--db", dsn, "--table", table, "--json"); !strings.Contains(st, fmt.Sprintf(`"PROCESSED":%d`, n)) {
		t.Fatalf("after the drain: %s", st)
	}
	t.Logf("broker restarted mid-drain: %d events, 0 lost, %d duplicates", n, dups)
}
