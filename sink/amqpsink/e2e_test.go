package amqpsink_test

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

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/sink"
)

// The end-to-end tests drive the real CLI: migrate and enqueue into
// PostgreSQL, `outbox relay --drain --sink amqp://...`, then read the
// messages back from a queue bound to the test's own exchange.

var (
	cliOnce sync.Once
	cliDir  string
	cliPath string
	cliErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cliDir != "" {
		os.RemoveAll(cliDir)
	}
	os.Exit(code)
}

// outboxCLI builds ./cmd/outbox once per test binary.
func outboxCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			cliErr = fmt.Errorf("go env GOMOD: %v", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		if cliDir, cliErr = os.MkdirTemp("", "outbox-cli-"); cliErr != nil {
			return
		}
		cliPath = filepath.Join(cliDir, "outbox")
		build := exec.Command("go", "build", "-o", cliPath, "./cmd/outbox")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("go build ./cmd/outbox: %v\n%s", err, out)
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliPath
}

func runCLI(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(outboxCLI(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("outbox %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// backlog is a table in PostgreSQL holding n enqueued events over
// payment aggregates tx-0.. and merchant aggregates m-0.., each payload
// carrying its per-aggregate sequence number.
type backlog struct {
	dsn, table string
	ids        []string
}

func newBacklog(t *testing.T, n, payments, merchants int) *backlog {
	t.Helper()
	b := &backlog{dsn: testenv.Postgres.Addr(t), table: "e2e_amqp_" + uniq()}
	runCLI(t, "", "migrate", "--db", b.dsn, "--table", b.table)
	t.Cleanup(func() {
		_ = exec.Command(outboxCLI(t), "migrate", "--down", "--yes", "--db", b.dsn, "--table", b.table).Run()
	})
	var lines strings.Builder
	seq := map[string]int{}
	aggs := payments + merchants
	for i := 0; i < n; i++ {
		a := i % aggs
		typ, id, event := "payment", fmt.Sprintf("tx-%d", a), "ApprovalRequested"
		if a >= payments {
			typ, id, event = "merchant", fmt.Sprintf("m-%d", a-payments), "MerchantUpdated"
		}
		key := typ + "/" + id
		fmt.Fprintf(&lines, `{"aggregate_type":%q,"aggregate_id":%q,"event_type":%q,"payload":{"agg":%q,"seq":%d}}`+"\n",
			typ, id, event, key, seq[key])
		seq[key]++
	}
	b.ids = strings.Fields(runCLI(t, lines.String(), "enqueue", "--db", b.dsn, "--table", b.table))
	if len(b.ids) != n {
		t.Fatalf("enqueue printed %d ids, want %d", len(b.ids), n)
	}
	return b
}

func (b *backlog) relayArgs(sinkURL string, extra ...string) []string {
	return append([]string{"relay", "--drain", "--db", b.dsn, "--table", b.table, "--sink", sinkURL,
		"--poll-interval", "20ms", "--progress", "0"}, extra...)
}

func (b *backlog) processed(t *testing.T) int {
	out := runCLI(t, "", "status", "--json", "--db", b.dsn, "--table", b.table)
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json printed %q: %v", out, err)
	}
	n, _ := st["PROCESSED"].(float64)
	return int(n)
}

// checkDelivered asserts: every enqueued event arrived, in order per
// aggregate once repeats (by event id) are dropped, each with the routing
// key its aggregate type routes to. It returns the number of repeats.
func checkDelivered(t *testing.T, ds []amqp.Delivery, b *backlog, keyOf func(aggType string) string) int {
	t.Helper()
	want := map[string]bool{}
	for _, id := range b.ids {
		want[id] = true
	}
	seen := map[string]bool{}
	next := map[string]int{}
	repeats := 0
	for _, d := range ds {
		id, _ := d.Headers[sink.HeaderEventID].(string)
		if id == "" || d.MessageId != id {
			t.Fatalf("message without the event id (header %q, message-id %q)", id, d.MessageId)
		}
		if !want[id] {
			t.Fatalf("message with an event id that was never enqueued: %s", id)
		}
		if seen[id] {
			repeats++
			continue
		}
		seen[id] = true
		typ, _ := d.Headers[sink.HeaderAggregateType].(string)
		if d.RoutingKey != keyOf(typ) {
			t.Fatalf("a %s event arrived with routing key %s, want %s", typ, d.RoutingKey, keyOf(typ))
		}
		var p struct {
			Agg string
			Seq int
		}
		if err := json.Unmarshal(d.Body, &p); err != nil {
			t.Fatalf("payload %s: %v", d.Body, err)
		}
		if p.Seq != next[p.Agg] {
			t.Fatalf("aggregate %s: event %d arrived when %d was next (order broken)", p.Agg, p.Seq, next[p.Agg])
		}
		next[p.Agg]++
	}
	if len(seen) != len(b.ids) {
		t.Fatalf("%d of %d events arrived", len(seen), len(b.ids))
	}
	return repeats
}

// TestE2EDrain drains 2000 events over payment and merchant aggregates to
// an exchange of this test: payment events with routing key
// payment.events, merchant events on the override merchant.audit.
func TestE2EDrain(t *testing.T) {
	u := brokerURL(t)
	ex := "outbox.e2e." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	b := newBacklog(t, 2000, 30, 10)
	// The queue is bound before the relay runs: until then, every event
	// would be returned as unroutable (and retried).
	r := newQueueReader(t, u, ex, "#", true)
	runCLI(t, "", b.relayArgs(u+"?exchange="+ex, "--route", "merchant=merchant.audit")...)
	if n := b.processed(t); n != len(b.ids) {
		t.Fatalf("%d of %d events PROCESSED after the drain", n, len(b.ids))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ds, err := r.deliveries(ctx, len(b.ids))
	if err != nil {
		t.Fatalf("read %d of %d: %v", len(ds), len(b.ids), err)
	}
	if dups := checkDelivered(t, ds, b, func(typ string) string {
		if typ == "merchant" {
			return "merchant.audit"
		}
		return typ + ".events"
	}); dups != 0 {
		t.Fatalf("%d repeats without any fault", dups)
	}
}

// TestE2ERestartDuringDrain stops and starts the broker while a relay
// drains a large backlog into a durable queue: nothing is lost, order
// holds once repeats are dropped, and the drain completes with exit 0.
func TestE2ERestartDuringDrain(t *testing.T) {
	u := brokerURL(t)
	rabbitmqctl(t, u, "status") // skip now if the broker cannot be restarted
	n := 20000
	if testenv.Short() {
		n = 5000
	}
	ex := "outbox.e2e." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	b := newBacklog(t, n, 80, 20)
	r := newQueueReader(t, u, ex, "#", true)
	_, ch := dialT(t, u)

	cmd := exec.Command(outboxCLI(t), b.relayArgs(u+"?exchange="+ex+"&publish_timeout=2s&reconnect_wait=100ms",
		"--batch", "100", "--backoff-min", "10ms", "--backoff-max", "500ms", "--max-retries", "1000")...)
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})

	// Wait until a tenth of the backlog is queued, then restart.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for queued := 0; queued < n/10; {
		select {
		case <-done:
			t.Fatalf("the relay exited (%v) before the restart:\n%s", exitErr, stderr.String())
		case <-ctx.Done():
			t.Fatalf("only %d events were queued:\n%s", queued, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		q, err := ch.QueueDeclarePassive(r.queue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		queued = q.Messages
	}
	select {
	case <-done:
		t.Fatalf("the relay exited (%v) before the restart:\n%s", exitErr, stderr.String())
	default:
	}
	if err := restartBroker(ctx, t, u); err != nil {
		t.Fatal(err)
	}
	if err := r.connect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		if exitErr != nil {
			t.Fatalf("relay --drain after a broker restart: %v\n%s", exitErr, stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("the drain did not finish after the restart:\n%s", stderr.String())
	}
	log := stderr.String()
	if !strings.Contains(log, "connection to the broker lost") {
		t.Errorf("the relay never saw the broker go away; its log:\n%s", log)
	}
	for line := range strings.Lines(log) {
		if strings.Contains(line, "relay finished") {
			t.Log(strings.TrimSpace(line))
		}
	}
	if got := b.processed(t); got != n {
		t.Fatalf("%d of %d events PROCESSED", got, n)
	}
	ds, err := r.deliveries(ctx, n)
	if err != nil {
		t.Fatalf("read %d of %d: %v", len(ds), n, err)
	}
	dups := checkDelivered(t, ds, b, func(typ string) string { return typ + ".events" })
	t.Logf("%d events, %d repeats after the restart (bound: the events in flight)", n, dups)
	if dups > 100 {
		t.Fatalf("%d repeats: more than one batch (--batch 100), the most that can be in flight at the restart", dups)
	}
}

// syncBuffer is a bytes.Buffer safe for the writer goroutines of a process.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
