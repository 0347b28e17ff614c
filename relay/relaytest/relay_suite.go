package relaytest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/storetest"
)

func testRollbackNeverDelivers(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	txCount := 1000 // 10k events: not scaled, on every backend
	perTx := 10
	committed := map[outbox.EventID]bool{}
	rolledBack := map[outbox.EventID]bool{}
	for i := 0; i < txCount; i++ {
		tx, err := h.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		events := make([]outbox.Event, perTx)
		for j := range events {
			events[j] = storetest.PaymentEvent(fmt.Sprintf("agg-%d", (i*perTx+j)%97), i*perTx+j)
		}
		got, err := tx.Enqueue(ctx, events...)
		if err != nil {
			t.Fatal(err)
		}
		target := committed
		if i%2 == 1 {
			target = rolledBack
			err = tx.Rollback(ctx)
		} else {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range got {
			target[id] = true
		}
	}
	rec := &Recorder{Name: "sink"}
	cfg := testConfig(h, rec, "drainer")
	cfg.BatchSize = 500
	drain(t, newRelay(t, cfg), 5*time.Minute)
	seen := map[outbox.EventID]int{}
	for _, d := range rec.Deliveries() {
		seen[d.EventID]++
		if rolledBack[d.EventID] {
			t.Fatalf("event %s of a rolled-back transaction was delivered", d.EventID)
		}
	}
	for id := range committed {
		if seen[id] != 1 {
			t.Fatalf("committed event %s delivered %d times, want exactly 1", id, seen[id])
		}
	}
	if len(seen) != len(committed) {
		t.Fatalf("delivered %d distinct events, committed %d", len(seen), len(committed))
	}
	if n := storetest.CountStatus(t, h.Store, outbox.StatusProcessed); n != int64(len(committed)) {
		t.Fatalf("%d PROCESSED rows, want %d", n, len(committed))
	}
	if err := CheckOrder(rec.Deliveries()); err != nil {
		t.Fatal(err)
	}
}

func testConcurrentRelays(t *testing.T, h *storetest.Harness) {
	n := storetest.Scaled(h, 4000)
	// More aggregates than two batches of one relay cover, so that a relay
	// held at the meeting leaves aggregates for the others.
	const aggregates = 200
	var events []outbox.Event
	for i := 0; i < n; i++ {
		events = append(events, storetest.PaymentEvent(fmt.Sprintf("agg-%d", i%aggregates), i))
		if len(events) == 500 {
			storetest.Enqueue(t, h, events...)
			events = nil
		}
	}
	if len(events) > 0 {
		storetest.Enqueue(t, h, events...)
	}
	recs := NewRecorders(4)
	meet := newMeeting(2)
	var rs []*relay.Relay
	for i, rec := range recs {
		cfg := testConfig(h, meet.sink(rec), fmt.Sprintf("relay-%d", i))
		cfg.BatchSize = 50
		rs = append(rs, newRelay(t, cfg))
	}
	stop := runRelays(t, rs...)
	var last store.Stats
	defer func() {
		if t.Failed() {
			t.Logf("rows by status %v", last.Counts)
			for i, r := range rs {
				t.Logf("relay %d %+v", i, r.Stats())
			}
			// Where each relay's goroutines wait: a drain that stopped
			// while the relays kept claiming is read from here.
			buf := make([]byte, 8<<20)
			t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
		}
	}()
	// Bounds for a stall, not a speed: SQLite under -race on a busy
	// machine can take several minutes, so the drain fails only after 2
	// minutes without an event PROCESSED, or 10 minutes in all.
	wait.WhileProgressing(t, 2*time.Minute, 10*time.Minute, "all events PROCESSED", func() (bool, int64, error) {
		st, err := h.Store.Stats(context.Background(), true)
		if err == nil {
			last = st
		}
		return st.Counts[outbox.StatusProcessed] == int64(n), st.Counts[outbox.StatusProcessed], err
	})
	stop()
	all := recs[0].Shared()
	if len(all) != n {
		t.Fatalf("%d deliveries for %d events with no faults; want exactly once each", len(all), n)
	}
	seen := map[outbox.EventID]bool{}
	for _, d := range all {
		if seen[d.EventID] {
			t.Fatalf("event %s delivered twice with no faults", d.EventID)
		}
		seen[d.EventID] = true
	}
	if err := CheckOrder(all); err != nil {
		t.Fatal(err)
	}
	busy := 0
	for _, rec := range recs {
		if len(rec.Deliveries()) > 0 {
			busy++
		}
	}
	if busy < 2 {
		t.Errorf("only %d of 4 relays delivered anything; the work was not shared", busy)
	}
}

func testRetriesThenDelivered(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	ids := storetest.Enqueue(t, h, storetest.PaymentEvent("r1", 1), storetest.PaymentEvent("r1", 2), storetest.PaymentEvent("r2", 1))
	var mu sync.Mutex
	fails := map[outbox.EventID]int{}
	rec := &Recorder{Name: "sink", Fail: func(m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if fails[m.EventID] < 2 {
			fails[m.EventID]++
			return outbox.Retryable(fmt.Errorf("gateway unavailable (%d)", fails[m.EventID]), 0)
		}
		return nil
	}}
	r := newRelay(t, testConfig(h, rec, "retrier"))
	drain(t, r, time.Minute)
	ds := rec.Deliveries()
	if len(ds) != 3 {
		t.Fatalf("%d deliveries, want 3", len(ds))
	}
	if err := CheckOrder(ds); err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Attempt != 3 {
			t.Errorf("event %s delivered at attempt %d, want 3 (two failures first)", d.EventID, d.Attempt)
		}
	}
	for _, id := range ids {
		rec, err := h.Store.GetEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != outbox.StatusProcessed || rec.RetryCount != 2 {
			t.Errorf("%s: %s retry_count %d, want PROCESSED 2", id, rec.Status, rec.RetryCount)
		}
		atts, err := h.Store.Attempts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, a := range atts {
			if a.Outcome != store.Released {
				kinds = append(kinds, string(a.Outcome))
			}
		}
		if strings.Join(kinds, ",") != "RETRY,RETRY,DELIVERED" {
			t.Errorf("%s: audit trail %v, want RETRY,RETRY,DELIVERED", id, kinds)
		}
	}
	if st := r.Stats(); st.Retried < 4 || st.Delivered != 3 {
		t.Errorf("relay stats %+v", st)
	}
}

// syncBuffer is a log sink that tests can read while the relay writes.
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

func testMaxRetries(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	id := storetest.Enqueue(t, h, storetest.PaymentEvent("doomed", 1))[0]
	storetest.Enqueue(t, h, storetest.PaymentEvent("doomed", 2), storetest.PaymentEvent("healthy", 1))
	rec := &Recorder{Name: "sink", Fail: func(m outbox.Message) error {
		if m.AggregateID == "doomed" {
			return outbox.Retryable(fmt.Errorf("HTTP 503 from the gateway"), 0)
		}
		return nil
	}}
	var logs syncBuffer
	var alarms []relay.FailedEvent
	var alarmMu sync.Mutex
	cfg := testConfig(h, rec, "retrier")
	cfg.MaxRetries = 2
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	cfg.OnFailed = func(_ context.Context, fe relay.FailedEvent) {
		alarmMu.Lock()
		alarms = append(alarms, fe)
		alarmMu.Unlock()
	}
	drain(t, newRelay(t, cfg), time.Minute)
	r, err := h.Store.GetEvent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != outbox.StatusFailed || r.RetryCount != 3 || !strings.Contains(r.LastError, "503") {
		t.Fatalf("after max retries: %s retry_count %d last_error %q; want FAILED, 3, the reason", r.Status, r.RetryCount, r.LastError)
	}
	dls, err := h.Store.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 1 || dls[0].EventID != id || !strings.Contains(dls[0].Reason, "retries exhausted") {
		t.Fatalf("dead letters = %+v, %v", dls, err)
	}
	alarmMu.Lock()
	if len(alarms) != 1 || alarms[0].EventID != id || alarms[0].AggregateID != "doomed" || !alarms[0].Blocking || alarms[0].Attempts != 3 {
		t.Errorf("alarm callbacks = %+v", alarms)
	}
	alarmMu.Unlock()
	out := logs.String()
	if !strings.Contains(out, `"level":"ERROR"`) || !strings.Contains(out, id.String()) || !strings.Contains(out, `"aggregate_id":"doomed"`) {
		t.Errorf("no ERROR log line naming the failed event; logs:\n%s", out)
	}
	// The healthy aggregate was delivered; the doomed one's second event waits.
	if ds := rec.Deliveries(); len(ds) != 1 || !strings.Contains(ds[0].Key, "healthy") {
		t.Errorf("deliveries = %+v, want only the healthy event", ds)
	}
	if n := storetest.CountStatus(t, h.Store, outbox.StatusBlocked); n != 1 {
		t.Errorf("%d BLOCKED, want the doomed aggregate's second event", n)
	}
}

func testPermanent(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	id := storetest.Enqueue(t, h, storetest.PaymentEvent("bad-merchant", 1))[0]
	rec := &Recorder{Name: "sink", Fail: func(outbox.Message) error {
		return outbox.Permanent(fmt.Errorf("HTTP 400: invalid merchant"))
	}}
	drain(t, newRelay(t, testConfig(h, rec, "perm")), time.Minute)
	r, err := h.Store.GetEvent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != outbox.StatusFailed || r.RetryCount != 1 {
		t.Fatalf("permanent error: %s retry_count %d, want FAILED after 1 attempt", r.Status, r.RetryCount)
	}
	if atts, _ := h.Store.Attempts(ctx, id); len(atts) != 1 || atts[0].Outcome != store.Failed {
		t.Fatalf("attempts = %+v", atts)
	}
}

func testExpiredNeverSent(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	past := storetest.PaymentEvent("qr-old", 1)
	past.ExpiresAt = time.Now().Add(-time.Minute)
	soon := storetest.PaymentEvent("qr-soon", 1)
	const ttl = time.Second
	soon.TTL = ttl
	ids := storetest.Enqueue(t, h, past, soon)
	// The gateway is down until both deadlines have passed (soon's is at
	// most ttl after the enqueue returned) and up after it: the sink then
	// delivers whatever the relay still sends without a deadline that
	// passed (it refuses a message past its Deadline, as every sink does).
	upAt := time.Now().Add(ttl)
	var sends atomic.Int64
	rec := &Recorder{Name: "sink", Fail: func(m outbox.Message) error {
		sends.Add(1)
		if time.Now().Before(upAt) {
			return outbox.Retryable(fmt.Errorf("gateway down"), 0)
		}
		return nil
	}}
	cfg := testConfig(h, rec, "expirer")
	cfg.MaxRetries = 1000
	drain(t, newRelay(t, cfg), time.Minute)
	for _, id := range ids {
		r, err := h.Store.GetEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != outbox.StatusExpired {
			t.Fatalf("%s: %s, want EXPIRED", r.AggregateID, r.Status)
		}
		atts, err := h.Store.Attempts(ctx, id)
		if err != nil || len(atts) == 0 || atts[len(atts)-1].Outcome != store.Expired {
			t.Fatalf("%s: audit trail %+v must end with EXPIRED and its reason", r.AggregateID, atts)
		}
	}
	if len(rec.Deliveries()) != 0 {
		t.Fatalf("an expired event was delivered: %+v", rec.Deliveries())
	}
	if sends.Load() == 0 { // a machine too busy to claim it within the TTL
		t.Logf("the live event was never tried before its deadline")
	}
	// The event already past its deadline was never tried: its audit
	// holds only its expiry. Under load there may be two such rows: the
	// sweeper's, and the relay's for the claim that held the event then,
	// which is fenced.
	atts, err := h.Store.Attempts(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range atts {
		if a.Outcome != store.Expired {
			t.Fatalf("the event already past its deadline has the attempt rows %+v, want only its expiry", atts)
		}
	}
}

// noSweep is the harness's store with a sweeper that never expires (or
// does) anything: the relay's own check at claim time is then all that
// keeps an expired event from being sent.
type noSweep struct{ store.Store }

func (noSweep) Sweep(context.Context, store.SweepRequest) (store.SweepResult, error) {
	return store.SweepResult{}, nil
}

// The relay itself never sends an event that was past its deadline when
// claimed, even to a sink that would deliver it (one that ignores the
// Deadline it is given), and it gives the sink the event's deadline.
func testRelayChecksDeadline(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	past := storetest.PaymentEvent("qr-old", 1)
	past.ExpiresAt = time.Now().Add(-time.Minute)
	late := storetest.PaymentEvent("qr-late", 1) // due only after its deadline
	late.TTL, late.Delay = 200*time.Millisecond, 500*time.Millisecond
	live := storetest.PaymentEvent("qr-live", 1)
	live.TTL = time.Hour
	before := time.Now()
	ids := storetest.Enqueue(t, h, past, late, live)
	after := time.Now()
	rec := &Recorder{Name: "careless", IgnoreDeadline: true}
	cfg := testConfig(h, rec, "deadline-checker")
	cfg.Store = noSweep{h.Store}
	drain(t, newRelay(t, cfg), time.Minute)
	for i, want := range []outbox.Status{outbox.StatusExpired, outbox.StatusExpired, outbox.StatusProcessed} {
		r, err := h.Store.GetEvent(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != want {
			t.Errorf("%s: %s, want %s", r.AggregateID, r.Status, want)
		}
	}
	ds := rec.Deliveries()
	if len(ds) != 1 || ds[0].EventID != ids[2] {
		t.Fatalf("the sink received %+v, want only the live event: the relay sent an event past its deadline", ds)
	}
	// The deadline reaches the sink (on the relay's clock, converted from
	// the database's): an hour after the enqueue, give or take the clocks.
	// The conversion errs on the early side by as long as the claim took
	// (seconds on a busy machine), so the bound below is loose; later
	// than the deadline it may never be.
	lo, hi := before.Add(time.Hour-time.Minute), after.Add(time.Hour+5*time.Second)
	if d := ds[0].Deadline; d.Before(lo) || d.After(hi) {
		t.Fatalf("the live event reached the sink with deadline %v, want about %v", d, after.Add(time.Hour))
	}
}
