package natssink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/sink"
)

// The end-to-end tests drive the real CLI: migrate and enqueue into
// PostgreSQL, `outbox relay --drain --sink nats://...`, then read the
// stream back with a consumer of their own.

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
	b := &backlog{dsn: testenv.Postgres.Addr(t), table: "e2e_nats_" + uniq()}
	runCLI(t, "", "migrate", "--db", b.dsn, "--table", b.table)
	t.Cleanup(func() {
		cmd := exec.Command(outboxCLI(t), "migrate", "--down", "--yes", "--db", b.dsn, "--table", b.table)
		_ = cmd.Run()
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

// processed returns the number of PROCESSED events.
func (b *backlog) processed(t *testing.T) int {
	out := runCLI(t, "", "status", "--json", "--db", b.dsn, "--table", b.table)
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json printed %q: %v", out, err)
	}
	n, _ := st["PROCESSED"].(float64)
	return int(n)
}

// readStream returns every message in a stream, in stream order.
func readStream(t *testing.T, js jetstream.JetStream, stream string) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	want := st.CachedInfo().State.Msgs
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for uint64(len(out)) < want {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("read stream %s: %v", stream, err)
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d messages of stream %s", len(out), want, stream)
		}
	}
	return out
}

// checkDelivered asserts: every enqueued event arrived, none twice (the
// stream drops repeats by Nats-Msg-Id), in order per aggregate, each on
// the subject its aggregate type routes to.
func checkDelivered(t *testing.T, msgs []jetstream.Msg, b *backlog, subjectOf func(aggType string) string) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range b.ids {
		want[id] = true
	}
	seen := map[string]bool{}
	next := map[string]int{}
	for _, m := range msgs {
		id := m.Headers().Get(sink.HeaderEventID)
		if id == "" || m.Headers().Get(jetstream.MsgIDHeader) != id {
			t.Fatalf("message on %s without the event id (%s=%q, Nats-Msg-Id=%q)", m.Subject(), sink.HeaderEventID, id, m.Headers().Get(jetstream.MsgIDHeader))
		}
		if !want[id] {
			t.Fatalf("message with an event id that was never enqueued: %s", id)
		}
		if seen[id] {
			t.Fatalf("event %s is in the stream twice", id)
		}
		seen[id] = true
		typ := m.Headers().Get(sink.HeaderAggregateType)
		if got := m.Subject(); got != subjectOf(typ) {
			t.Fatalf("a %s event arrived on %s, want %s", typ, got, subjectOf(typ))
		}
		var p struct {
			Agg string
			Seq int
		}
		if err := json.Unmarshal(m.Data(), &p); err != nil {
			t.Fatalf("payload %s: %v", m.Data(), err)
		}
		if wantAgg := typ + "/" + m.Headers().Get(sink.HeaderAggregateID); p.Agg != wantAgg {
			t.Fatalf("payload of %s arrived with headers of %s", p.Agg, wantAgg)
		}
		if p.Seq != next[p.Agg] {
			t.Fatalf("aggregate %s: event %d arrived when %d was next (order broken)", p.Agg, p.Seq, next[p.Agg])
		}
		next[p.Agg]++
	}
	if len(seen) != len(b.ids) {
		t.Fatalf("%d of %d events arrived", len(seen), len(b.ids))
	}
}

// TestE2EDrainSharedServer drains 2000 events over payment and merchant
// aggregates into the shared NATS server, on subjects of this test, with
// a --route override for merchant events.
func TestE2EDrainSharedServer(t *testing.T) {
	url := sharedURL(t)
	id := uniq()
	b := newBacklog(t, 2000, 30, 10)
	stream := "E" + id
	t.Cleanup(func() { deleteStream(t, url, stream) })
	sinkURL := fmt.Sprintf("%s?subject=e%s.{aggregate_type}.events&stream=%s&stream_subjects=e%s.>", url, id, stream, id)
	runCLI(t, "", b.relayArgs(sinkURL, "--route", "merchant=e"+id+".merchant.audit")...)
	if n := b.processed(t); n != len(b.ids) {
		t.Fatalf("%d of %d events PROCESSED after the drain", n, len(b.ids))
	}
	_, js := jsClient(t, url)
	checkDelivered(t, readStream(t, js, stream), b, func(typ string) string {
		if typ == "merchant" {
			return "e" + id + ".merchant.audit"
		}
		return "e" + id + "." + typ + ".events"
	})
}

// TestE2EDrainDefaults drains into a private server with the sink's
// defaults: subjects payment.events and merchant.events, and the stream
// OUTBOX on *.events, which the sink creates.
func TestE2EDrainDefaults(t *testing.T) {
	e := startEmbedded(t)
	b := newBacklog(t, 2000, 30, 10)
	runCLI(t, "", b.relayArgs(e.URL)...)
	if n := b.processed(t); n != len(b.ids) {
		t.Fatalf("%d of %d events PROCESSED after the drain", n, len(b.ids))
	}
	_, js := jsClient(t, e.URL)
	st, err := js.Stream(context.Background(), "OUTBOX")
	if err != nil {
		t.Fatalf("the sink did not create stream OUTBOX: %v", err)
	}
	// *.events, or, on servers that refuse it (NATS 2.10 and later: it
	// could capture $JS.events), the subjects published to.
	subj := slices.Sorted(slices.Values(st.CachedInfo().Config.Subjects))
	if !slices.Equal(subj, []string{"*.events"}) && !slices.Equal(subj, []string{"merchant.events", "payment.events"}) {
		t.Fatalf("stream OUTBOX has subjects %v, want [*.events] or [merchant.events payment.events]", subj)
	}
	checkDelivered(t, readStream(t, js, "OUTBOX"), b, func(typ string) string { return typ + ".events" })
}

// TestE2ERestartDuringDrain restarts a private NATS server while a relay
// drains a large backlog into it: nothing is lost, nothing is stored
// twice, order holds, and the drain completes with exit 0.
func TestE2ERestartDuringDrain(t *testing.T) {
	e := startEmbedded(t)
	n := 20000
	if testenv.Short() {
		n = 5000
	}
	b := newBacklog(t, n, 80, 20)
	_, js := jsClient(t, e.URL)

	cmd := exec.Command(outboxCLI(t), b.relayArgs(e.URL+"?publish_timeout=2s&reconnect_wait=50ms",
		"--batch", "100", "--backoff-min", "10ms", "--backoff-max", "200ms", "--max-retries", "1000")...)
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

	// Wait until a tenth of the backlog is in the stream, then restart.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for stored := uint64(0); stored < uint64(n/10); {
		select {
		case <-done:
			t.Fatalf("the relay exited (%v) before the restart:\n%s", exitErr, stderr.String())
		case <-ctx.Done():
			t.Fatalf("only %d events reached the stream:\n%s", stored, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		if st, err := js.Stream(sctx, "OUTBOX"); err == nil {
			stored = st.CachedInfo().State.Msgs
		}
		scancel()
	}
	if err := e.restart(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "OUTBOX")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got >= uint64(n) {
		t.Fatalf("the drain had finished (%d events stored) by the time the server was back: restart earlier", got)
	} else {
		t.Logf("server restarted with %d of %d events stored", got, n)
	}
	select {
	case <-done:
		if exitErr != nil {
			t.Fatalf("relay --drain after a server restart: %v\n%s", exitErr, stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("the drain did not finish after the restart:\n%s", stderr.String())
	}
	for line := range strings.Lines(stderr.String()) {
		if strings.Contains(line, "relay finished") {
			t.Log(strings.TrimSpace(line))
		}
	}
	if !strings.Contains(stderr.String(), "disconnected") {
		t.Errorf("the relay never saw the server go away; its log:\n%s", stderr.String())
	}
	if got := b.processed(t); got != n {
		t.Fatalf("%d of %d events PROCESSED", got, n)
	}
	checkDelivered(t, readStream(t, js, "OUTBOX"), b, func(typ string) string { return typ + ".events" })
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
