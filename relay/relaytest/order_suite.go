package relaytest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/storetest"
)

func testOrderUnderFailures(t *testing.T, h *storetest.Harness) {
	aggs, per := 20, storetest.Scaled(h, 30)
	for i := 0; i < per; i++ {
		var batch []outbox.Event
		for a := 0; a < aggs; a++ {
			batch = append(batch, storetest.PaymentEvent(fmt.Sprintf("agg-%d", a), i))
		}
		storetest.Enqueue(t, h, batch...)
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
	var last store.Stats
	defer func() {
		if t.Failed() {
			t.Logf("rows by status %v; relay 0 %+v; relay 1 %+v", last.Counts, rs[0].Stats(), rs[1].Stats())
		}
	}()
	// Bounds for a stall, not a speed: on a busy machine MariaDB can take
	// minutes, so the drain fails only after 2 minutes without an event
	// PROCESSED, or 10 minutes in all.
	wait.WhileProgressing(t, 2*time.Minute, 10*time.Minute, "all events PROCESSED", func() (bool, int64, error) {
		st, err := h.Store.Stats(context.Background(), true)
		if err == nil {
			last = st
		}
		return st.Counts[outbox.StatusProcessed] == total, st.Counts[outbox.StatusProcessed], err
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
func testPipelinedDrain(t *testing.T, h *storetest.Harness) {
	aggs, per := 10, 30
	for i := 0; i < per; i++ {
		var batch []outbox.Event
		for a := 0; a < aggs; a++ {
			batch = append(batch, storetest.PaymentEvent(fmt.Sprintf("agg-%d", a), i))
		}
		storetest.Enqueue(t, h, batch...)
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
	// A bound for a hang, not a speed: on a busy machine MariaDB and
	// SQLite can take several minutes for this drain.
	drain(t, newRelay(t, cfg), 10*time.Minute)
	if err := CheckOrder(rec.Deliveries()); err != nil {
		t.Fatal(err)
	}
	if n := storetest.CountStatus(t, h.Store, outbox.StatusProcessed); n != int64(aggs*per) {
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

func testPausedRelayFenced(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	id := storetest.Enqueue(t, h, storetest.PaymentEvent("paused", 1))[0]
	gate := NewGate(outbox.Permanent(fmt.Errorf("stale relay's late answer")))
	slow := &Recorder{Name: "paused", Fail: gate.Fail}
	cfgA := testConfig(h, slow, "relay-paused")
	// A lease that ends soon, but leaves a claim (which gets half of it)
	// time on a loaded machine, where a lease of a few hundred
	// milliseconds lets no claim through.
	cfgA.Lease = 2 * time.Second
	a := newRelay(t, cfgA)
	stopA := runRelays(t, a)
	select {
	case <-gate.Entered():
	case <-time.After(time.Minute):
		t.Fatal("the first relay never started publishing")
	}
	good := &Recorder{Name: "good"}
	b := newRelay(t, testConfig(h, good, "relay-healthy"))
	stopB := runRelays(t, b)
	wait.Until(t, time.Minute, "the healthy relay to deliver the reaped event", func() (bool, error) {
		r, err := h.Store.GetEvent(ctx, id)
		return r.Status == outbox.StatusProcessed, err
	})
	stopB()
	gate.Open()
	wait.Until(t, 30*time.Second, "the paused relay to try to record its outcome", func() (bool, error) {
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

func testCleanStop(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	var events []outbox.Event
	for i := 0; i < 200; i++ {
		events = append(events, storetest.PaymentEvent(fmt.Sprintf("agg-%d", i%10), i))
	}
	storetest.Enqueue(t, h, events...)
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

func testDrainBlocked(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	storetest.Enqueue(t, h, storetest.PaymentEvent("stuck", 1), storetest.PaymentEvent("stuck", 2), storetest.PaymentEvent("stuck", 3), storetest.PaymentEvent("free", 1))
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
