package storetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// RunRelay checks the guarantees end to end through the real relay.
func RunRelay(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"RollbackNeverDeliversCommitAlways", testRollbackNeverDelivers},
		{"ConcurrentRelaysExactlyOnce", testConcurrentRelays},
		{"RetriesThenDelivered", testRetriesThenDelivered},
		{"MaxRetriesFailsWithDeadLetterAndAlarm", testMaxRetries},
		{"PermanentErrorFailsAtOnce", testPermanent},
		{"ExpiredNeverSent", testExpiredNeverSent},
		{"RelayNeverSendsExpiredEvenToACarelessSink", testRelayChecksDeadline},
		{"OrderUnderRandomFailuresTwoRelays", testOrderUnderFailures},
		{"PipelinedDrainWithSlowFlakySink", testPipelinedDrain},
		{"PausedRelayIsFenced", testPausedRelayFenced},
		{"CleanStopLeavesNothingProcessing", testCleanStop},
		{"DrainStopsAtBlockedAggregates", testDrainBlocked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

// testConfig is a relay configuration with short timings for tests. The
// circuit breaker is off: these tests check the retry policy, order and
// fencing with sinks that fail some events on purpose, which would open
// it (its own tests are in the relay package and RunRoutes).
func testConfig(h *Harness, s sink.Sink, id string) relay.Config {
	return relay.Config{
		Breaker:       relay.BreakerConfig{Disabled: true},
		Store:         h.Store,
		Sink:          s,
		RelayID:       id,
		BatchSize:     100,
		PollInterval:  20 * time.Millisecond,
		SweepInterval: 50 * time.Millisecond,
		Lease:         30 * time.Second,
		BackoffMin:    5 * time.Millisecond,
		BackoffMax:    20 * time.Millisecond,
		StopTimeout:   5 * time.Second,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func newRelay(t testing.TB, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	return r
}

func drain(t testing.TB, r *relay.Relay, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("drain: %v (stats %+v)", err, r.Stats())
	}
}

// runRelays runs relays until stop is called; stop waits for them.
func runRelays(t testing.TB, rs ...*relay.Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil {
				t.Errorf("relay %s: %v", r.ID(), err)
			}
		}()
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

func testRollbackNeverDelivers(t *testing.T, h *Harness) {
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
			events[j] = ev(fmt.Sprintf("agg-%d", (i*perTx+j)%97), i*perTx+j)
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
	if n := countStatus(t, h.Store, outbox.StatusProcessed); n != int64(len(committed)) {
		t.Fatalf("%d PROCESSED rows, want %d", n, len(committed))
	}
	if err := CheckOrder(rec.Deliveries()); err != nil {
		t.Fatal(err)
	}
}

func testConcurrentRelays(t *testing.T, h *Harness) {
	n := scaled(h, 4000)
	// More aggregates than two batches of one relay cover, so that a relay
	// held at the meeting leaves aggregates for the others.
	const aggregates = 200
	var events []outbox.Event
	for i := 0; i < n; i++ {
		events = append(events, ev(fmt.Sprintf("agg-%d", i%aggregates), i))
		if len(events) == 500 {
			enqueue(t, h, events...)
			events = nil
		}
	}
	if len(events) > 0 {
		enqueue(t, h, events...)
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
	waitFor(t, 2*time.Minute, "all events PROCESSED", func() (bool, error) {
		st, err := h.Store.Stats(context.Background(), true)
		return st.Counts[outbox.StatusProcessed] == int64(n), err
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

func testRetriesThenDelivered(t *testing.T, h *Harness) {
	ctx := context.Background()
	ids := enqueue(t, h, ev("r1", 1), ev("r1", 2), ev("r2", 1))
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

func testMaxRetries(t *testing.T, h *Harness) {
	ctx := context.Background()
	id := enqueue(t, h, ev("doomed", 1))[0]
	enqueue(t, h, ev("doomed", 2), ev("healthy", 1))
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
	if n := countStatus(t, h.Store, outbox.StatusBlocked); n != 1 {
		t.Errorf("%d BLOCKED, want the doomed aggregate's second event", n)
	}
}

func testPermanent(t *testing.T, h *Harness) {
	ctx := context.Background()
	id := enqueue(t, h, ev("bad-merchant", 1))[0]
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

func testExpiredNeverSent(t *testing.T, h *Harness) {
	ctx := context.Background()
	past := ev("qr-old", 1)
	past.ExpiresAt = time.Now().Add(-time.Minute)
	soon := ev("qr-soon", 1)
	const ttl = time.Second
	soon.TTL = ttl
	ids := enqueue(t, h, past, soon)
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
	r, _ := h.Store.GetEvent(ctx, ids[0])
	if atts, _ := h.Store.Attempts(ctx, ids[0]); len(atts) != 1 {
		t.Fatalf("the event already past its deadline had %d attempt rows (%s), want only the expiry", len(atts), r.LastError)
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
func testRelayChecksDeadline(t *testing.T, h *Harness) {
	ctx := context.Background()
	past := ev("qr-old", 1)
	past.ExpiresAt = time.Now().Add(-time.Minute)
	late := ev("qr-late", 1) // due only after its deadline
	late.TTL, late.Delay = 200*time.Millisecond, 500*time.Millisecond
	live := ev("qr-live", 1)
	live.TTL = time.Hour
	before := time.Now()
	ids := enqueue(t, h, past, late, live)
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
	lo, hi := before.Add(time.Hour-5*time.Second), after.Add(time.Hour+5*time.Second)
	if d := ds[0].Deadline; d.Before(lo) || d.After(hi) {
		t.Fatalf("the live event reached the sink with deadline %v, want about %v", d, after.Add(time.Hour))
	}
}

func testOrderUnderFailures(t *testing.T, h *Harness) {
	aggs, per := 20, scaled(h, 30)
	for i := 0; i < per; i++ {
		var batch []outbox.Event
		for a := 0; a < aggs; a++ {
			batch = append(batch, ev(fmt.Sprintf("agg-%d", a), i))
		}
		enqueue(t, h, batch...)
	}
	recs := NewRecorders(2)
	var rs []*relay.Relay
	for i, rec := range recs {
		seed := uint64(i + 1)
		rnd := rand.New(rand.NewPCG(seed, seed))
		var mu sync.Mutex
		rec.Fail = func(outbox.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if rnd.Float64() < 0.2 {
				return errTransient
			}
			return nil
		}
		cfg := testConfig(h, rec, fmt.Sprintf("relay-%d", i))
		cfg.BatchSize = 25
		cfg.MaxRetries = 100
		rs = append(rs, newRelay(t, cfg))
	}
	stop := runRelays(t, rs...)
	total := int64(aggs * per)
	waitFor(t, 2*time.Minute, "all events PROCESSED", func() (bool, error) {
		st, err := h.Store.Stats(context.Background(), true)
		return st.Counts[outbox.StatusProcessed] == total, err
	})
	stop()
	all := recs[0].Shared()
	if err := CheckOrder(all); err != nil {
		t.Fatal(err)
	}
	seen := map[outbox.EventID]bool{}
	for _, d := range all {
		seen[d.EventID] = true
	}
	if int64(len(seen)) != total {
		t.Fatalf("%d distinct events delivered, want %d", len(seen), total)
	}
}

// testPipelinedDrainWithSlowFlakySink: one relay with several batches in
// flight, a sink that takes time and fails a third of the messages: the
// drain finishes (no aggregate is held back forever) and order holds.
func testPipelinedDrain(t *testing.T, h *Harness) {
	aggs, per := 10, 30
	for i := 0; i < per; i++ {
		var batch []outbox.Event
		for a := 0; a < aggs; a++ {
			batch = append(batch, ev(fmt.Sprintf("agg-%d", a), i))
		}
		enqueue(t, h, batch...)
	}
	rnd := rand.New(rand.NewPCG(3, 3))
	var mu sync.Mutex
	rec := &Recorder{Name: "sink", Fail: func(outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if rnd.Float64() < 0.3 {
			return errTransient
		}
		return nil
	}}
	cfg := testConfig(h, slowSink{rec, time.Millisecond}, "pipelined")
	cfg.BatchSize = 50
	cfg.PollInterval = 10 * time.Millisecond
	cfg.MaxRetries = 1000
	drain(t, newRelay(t, cfg), 2*time.Minute)
	if err := CheckOrder(rec.Deliveries()); err != nil {
		t.Fatal(err)
	}
	if n := countStatus(t, h.Store, outbox.StatusProcessed); n != int64(aggs*per) {
		t.Fatalf("%d PROCESSED, want %d", n, aggs*per)
	}
}

// slowSink adds a network round trip to every Publish call.
type slowSink struct {
	*Recorder
	latency time.Duration
}

func (s slowSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	<-time.After(s.latency) // simulated latency, not synchronization
	return s.Recorder.Publish(ctx, msgs)
}

func testPausedRelayFenced(t *testing.T, h *Harness) {
	ctx := context.Background()
	id := enqueue(t, h, ev("paused", 1))[0]
	gate := NewGate(outbox.Permanent(fmt.Errorf("stale relay's late answer")))
	slow := &Recorder{Name: "paused", Fail: gate.Fail}
	cfgA := testConfig(h, slow, "relay-paused")
	cfgA.Lease = 300 * time.Millisecond
	a := newRelay(t, cfgA)
	stopA := runRelays(t, a)
	select {
	case <-gate.Entered():
	case <-time.After(30 * time.Second):
		t.Fatal("the first relay never started publishing")
	}
	good := &Recorder{Name: "good"}
	b := newRelay(t, testConfig(h, good, "relay-healthy"))
	stopB := runRelays(t, b)
	waitFor(t, 30*time.Second, "the healthy relay to deliver the reaped event", func() (bool, error) {
		r, err := h.Store.GetEvent(ctx, id)
		return r.Status == outbox.StatusProcessed, err
	})
	stopB()
	gate.Open()
	waitFor(t, 30*time.Second, "the paused relay to try to record its outcome", func() (bool, error) {
		return a.Stats().Fenced >= 1, nil
	})
	stopA()
	r, err := h.Store.GetEvent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != outbox.StatusProcessed || r.RetryCount != 0 {
		t.Fatalf("final state %s/%d; want the healthy relay's PROCESSED/0", r.Status, r.RetryCount)
	}
	if st := a.Stats(); st.Failed != 0 {
		t.Fatalf("the paused relay counted %d failures; its outcome must change 0 rows", st.Failed)
	}
	if dls, _ := h.Store.DeadLetters(ctx, 10); len(dls) != 0 {
		t.Fatalf("the fenced FAILED outcome wrote dead letters: %+v", dls)
	}
	if len(good.Deliveries()) != 1 {
		t.Fatalf("healthy relay deliveries = %d", len(good.Deliveries()))
	}
}

func testCleanStop(t *testing.T, h *Harness) {
	ctx := context.Background()
	var events []outbox.Event
	for i := 0; i < 200; i++ {
		events = append(events, ev(fmt.Sprintf("agg-%d", i%10), i))
	}
	enqueue(t, h, events...)
	gate := NewGate(nil)
	rec := &Recorder{Name: "sink", Fail: func(m outbox.Message) error {
		return gate.Fail(m)
	}}
	cfg := testConfig(h, rec, "stopper")
	cfg.BatchSize = 50
	cfg.StopTimeout = 100 * time.Millisecond
	r := newRelay(t, cfg)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	select {
	case <-gate.Entered():
	case <-time.After(30 * time.Second):
		t.Fatal("relay never started publishing")
	}
	cancel() // SIGTERM while a batch is in flight
	gate.Open()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after a stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop")
	}
	st, err := h.Store.Stats(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[outbox.StatusProcessing] != 0 {
		t.Fatalf("a clean stop left %d rows PROCESSING", st.Counts[outbox.StatusProcessing])
	}
	if got := st.Counts[outbox.StatusProcessed] + st.Counts[outbox.StatusPending]; got != 200 {
		t.Fatalf("counts after stop %v, want 200 PROCESSED or PENDING", st.Counts)
	}
	if st.Counts[outbox.StatusProcessed] != int64(len(rec.Deliveries())) {
		t.Fatalf("%d PROCESSED but the sink saw %d", st.Counts[outbox.StatusProcessed], len(rec.Deliveries()))
	}
}

func testDrainBlocked(t *testing.T, h *Harness) {
	ctx := context.Background()
	enqueue(t, h, ev("stuck", 1), ev("stuck", 2), ev("stuck", 3), ev("free", 1))
	rec := &Recorder{Name: "sink", Fail: func(m outbox.Message) error {
		if m.AggregateID == "stuck" {
			return outbox.Permanent(fmt.Errorf("HTTP 422"))
		}
		return nil
	}}
	drain(t, newRelay(t, testConfig(h, rec, "drainer")), time.Minute)
	st, err := h.Store.Stats(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[outbox.StatusFailed] != 1 || st.Counts[outbox.StatusBlocked] != 2 || st.Counts[outbox.StatusProcessed] != 1 {
		t.Fatalf("after drain: %v; want 1 FAILED, 2 BLOCKED, 1 PROCESSED", st.Counts)
	}
}
