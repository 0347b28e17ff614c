package relay

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/store/sqlite"
)

func TestRouteHealthRateLimitsAndRecovers(t *testing.T) {
	var logs testenv.Buffer
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	h := newRouteHealth(slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return now })
	fail := func(n int, e string) {
		h.batchRecorded(map[string]*routeResult{"payment.events": {failures: n, lastErr: e}})
	}
	ok := func() { h.batchRecorded(map[string]*routeResult{"payment.events": {delivered: 3}}) }

	ok() // healthy: nothing to say
	fail(2, "503 from gateway")
	now = now.Add(10 * time.Second)
	fail(1, "503 again") // within the interval: no line
	now = now.Add(25 * time.Second)
	fail(4, "connection refused")
	now = now.Add(15 * time.Second)
	ok()

	warns := logs.Lines("level=WARN", "route=payment.events")
	if len(warns) != 2 {
		t.Fatalf("WARN lines = %d, want 2 (start, then one after the interval):\n%s", len(warns), logs.String())
	}
	for _, want := range []string{"are failing", "failures=2", `last_error="503 from gateway"`} {
		if !strings.Contains(warns[0], want) {
			t.Errorf("first WARN %q lacks %q", warns[0], want)
		}
	}
	for _, want := range []string{"still failing", "failures=7", "since_last_warning=5", "failing_for=35s", `last_error="connection refused"`} {
		if !strings.Contains(warns[1], want) {
			t.Errorf("second WARN %q lacks %q", warns[1], want)
		}
	}
	infos := logs.Lines("level=INFO", "recovered", "route=payment.events")
	if len(infos) != 1 || !strings.Contains(infos[0], "failures=7") || !strings.Contains(infos[0], "down_for=50s") {
		t.Fatalf("recovery lines = %q", infos)
	}

	// Flapping within one interval: the new start is not logged, and
	// neither is its end.
	now = now.Add(time.Second)
	fail(1, "503")
	ok()
	if n := len(logs.Lines("level=WARN")); n != 2 {
		t.Errorf("a failure within the interval after the last WARN was logged (%d WARN lines)", n)
	}
	if n := len(logs.Lines("recovered")); n != 1 {
		t.Errorf("an unlogged outage's end was logged (%d recovery lines)", n)
	}
	// Past the interval, a new outage is logged again.
	now = now.Add(outageLogEvery)
	fail(1, "timeout")
	if n := len(logs.Lines("level=WARN", "are failing")); n != 2 {
		t.Errorf("a new outage after the interval: %d start lines, want 2", n)
	}
}

// flakySink fails every message until up is set.
type flakySink struct {
	mu sync.Mutex
	up bool
	n  int
}

func (f *flakySink) Publish(_ context.Context, msgs []outbox.Message) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]error, len(msgs))
	for i := range msgs {
		if !f.up {
			f.n++
			out[i] = fmt.Errorf("dial tcp 10.0.0.7:443: connection refused (attempt %d)", f.n)
		}
	}
	return out
}
func (f *flakySink) Close(context.Context) error { return nil }

func (f *flakySink) failures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// sqliteWithEvent opens a migrated SQLite store in the test's directory
// with ev committed in it, and returns the store and the event's id.
func sqliteWithEvent(t *testing.T, ev outbox.Event) (*sqlite.Store, []outbox.EventID) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "o.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := s.Enqueue(ctx, tx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return s, ids
}

// TestOutageIsLogged runs a relay against a sink that is down, then up: the
// log has a WARN naming the route with the last error, then an INFO, and
// never the payload.
func TestOutageIsLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := sqliteWithEvent(t, outbox.Event{AggregateType: "payment", AggregateID: "tx-1", EventType: "ApprovalRequested",
		Payload: []byte(`{"card":"4111-1111"}`)})
	var logs testenv.Buffer
	sk := &flakySink{}
	r, err := New(Config{Store: s, Sink: sk, Logger: slog.New(slog.NewTextHandler(&logs, nil)), MaxRetries: 100,
		BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Drain(context.WithoutCancel(ctx)) }()
	deadline := time.Now().Add(2 * time.Minute) // a bound for a hang
	for sk.failures() < 3 || len(logs.Lines("level=WARN", "are failing")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no WARN after %d failures:\n%s", sk.failures(), logs.String())
		}
		<-time.After(5 * time.Millisecond) // poll the condition
	}
	sk.mu.Lock()
	sk.up = true
	sk.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	warn := logs.Lines("level=WARN", "are failing")[0]
	for _, want := range []string{"route=default", "connection refused", "failures="} {
		if !strings.Contains(warn, want) {
			t.Errorf("WARN %q lacks %q", warn, want)
		}
	}
	if len(logs.Lines("level=INFO", "route recovered", "route=default")) != 1 {
		t.Errorf("no recovery line:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "4111") {
		t.Errorf("the payload reached the log:\n%s", logs.String())
	}
}
