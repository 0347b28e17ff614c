package relaytest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/relay"

	"github.com/txoutbox/outbox/sink/sinkkit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/storetest"
)

// RunDeadlines checks what the relay makes of deadlines over the store:
// earliest-deadline-first meets the deadlines of urgent events behind a
// backlog where strict FIFO misses them, an event the relay retries past
// its deadline ends EXPIRED and its compensating event is delivered, a
// route's min_time_left is kept, what passed its deadline while no
// relay ran is reported once at start, and a relay whose clock is 10
// minutes ahead of or behind the database's keeps deadlines, leases and
// backoff on the database's clock. (The store's side of deadlines is
// storetest.RunDeadlines.)
func RunDeadlines(t *testing.T, newHarness storetest.Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *storetest.Harness)
		// serial: the test measures deadlines met under load of its own
		// making; it runs alone, before the others of the suite start.
		serial bool
	}{
		{name: "EDFMeetsDeadlinesUnderBacklog", fn: testEDFMeetsDeadlines, serial: true},
		{name: "StrictFIFOMissesDeadlinesUnderBacklog", fn: testStrictFIFOMissesDeadlines, serial: true},
		{name: "CompensationThroughRelay", fn: testCompensationThroughRelay},
		{name: "MinTimeLeftNeverSendsTooLate", fn: testMinTimeLeft},
		{name: "RestartReport", fn: testRestartReport},
		{name: "RelayClock10mAheadOfDatabase", fn: func(t *testing.T, h *storetest.Harness) { testRelayClockSkew(t, h, clockSkew) }},
		{name: "RelayClock10mBehindDatabase", fn: func(t *testing.T, h *storetest.Harness) { testRelayClockSkew(t, h, -clockSkew) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.serial {
				t.Parallel()
			}
			tc.fn(t, newHarness(t))
		})
	}
}

// gateway is a payment gateway for tests: every request takes latency,
// up to parallel requests at once, messages of one aggregate one after
// the other. It never starts a request past the message's deadline, and
// records when each request finished.
type gateway struct {
	latency  time.Duration
	parallel chan struct{}

	mu       sync.Mutex
	finished map[outbox.EventID]time.Time
	deadline map[outbox.EventID]time.Time
	position map[outbox.EventID]int // 1 for the first request finished, 2 for the next ...
}

func newGateway(latency time.Duration, parallel int) *gateway {
	return &gateway{latency: latency, parallel: make(chan struct{}, parallel),
		finished: map[outbox.EventID]time.Time{}, deadline: map[outbox.EventID]time.Time{}, position: map[outbox.EventID]int{}}
}

// Publish implements sink.Sink.
func (g *gateway) Publish(ctx context.Context, msgs []outbox.Message) []error {
	out := make([]error, len(msgs))
	byKey := map[string][]int{}
	var keys []string
	for i := range msgs {
		k := msgs[i].OrderingKey()
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func(idx []int) {
			defer wg.Done()
			for n, i := range idx {
				if err := g.request(ctx, &msgs[i]); err != nil {
					out[i] = err
					for _, j := range idx[n+1:] {
						out[j] = fmt.Errorf("an earlier message of the aggregate failed: %w", outbox.ErrNotAttempted)
					}
					return
				}
			}
		}(byKey[k])
	}
	wg.Wait()
	return out
}

func (g *gateway) request(ctx context.Context, m *outbox.Message) error {
	select {
	case g.parallel <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %v", outbox.ErrNotAttempted, ctx.Err())
	}
	defer func() { <-g.parallel }()
	if !m.Deadline.IsZero() && !time.Now().Before(m.Deadline) {
		return fmt.Errorf("deadline passed before the request: %w", context.DeadlineExceeded)
	}
	timer := time.NewTimer(g.latency) // the gateway's service time
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.mu.Lock()
	g.finished[m.EventID] = time.Now()
	g.deadline[m.EventID] = m.Deadline
	if _, ok := g.position[m.EventID]; !ok {
		g.position[m.EventID] = len(g.position) + 1
	}
	g.mu.Unlock()
	return nil
}

func (g *gateway) delivered() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.finished)
}

// met reports whether the gateway answered id before its deadline.
func (g *gateway) met(id outbox.EventID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.finished[id]
	return ok && at.Before(g.deadline[id])
}

// Close implements sink.Sink.
func (g *gateway) Close(context.Context) error { return nil }

// EDF test sizes, from the issue: 4,000 events of backlog through a
// gateway that takes 20 ms per request (16 at once: 800 requests/s, a
// 5 s backlog), then 100 events with a 2 s deadline on their own
// aggregates. With batches of 200, the default FIFO share leaves 100
// slots of the next claim to the nearest deadlines.
const (
	edfBacklog   = 4000
	edfLatency   = 20 * time.Millisecond
	edfParallel  = 16
	edfUrgent    = 100
	edfTTL       = 2 * time.Second
	edfBatchSize = 200
)

// runEDFBacklog drains the backlog through the gateway with EDF on or off
// and returns how many of the urgent events met their deadline and how
// many ended EXPIRED.
func runEDFBacklog(t *testing.T, h *storetest.Harness, strictFIFO bool) (met, expired int) {
	if h.NoDeadlineTiming != "" {
		t.Skip(h.NoDeadlineTiming)
	}
	met, expired, _ = drainEDFBacklog(t, h, strictFIFO, edfTTL)
	return met, expired
}

// drainEDFBacklog drains the backlog with urgent events of the given time
// to live enqueued once the drain is under way, and also returns how
// many backlog events the gateway finished between the urgent events'
// enqueue and the last of them: the backlog they waited behind.
func drainEDFBacklog(t *testing.T, h *storetest.Harness, strictFIFO bool, ttl time.Duration) (met, expired, waitedBehind int) {
	ctx := context.Background()
	for start := 0; start < edfBacklog; start += 1000 {
		var chunk []outbox.Event
		for i := start; i < start+1000; i++ {
			chunk = append(chunk, storetest.PaymentEvent(fmt.Sprintf("backlog-%04d", i), 1))
		}
		storetest.Enqueue(t, h, chunk...)
	}
	gw := newGateway(edfLatency, edfParallel)
	cfg := testConfig(h, gw, "edf")
	cfg.BatchSize = edfBatchSize
	cfg.StrictFIFO = strictFIFO
	r := newRelay(t, cfg)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil && rctx.Err() == nil {
			t.Errorf("relay: %v", err)
		}
	}()
	// The urgent events arrive while the backlog is being drained.
	wait.Until(t, time.Minute, "the relay to start on the backlog", func() (bool, error) { return gw.delivered() >= 200, nil })
	var urgent []outbox.Event
	for i := range edfUrgent {
		urgent = append(urgent, storetest.DeadlineEvent(fmt.Sprintf("qr-%03d", i), ttl))
	}
	ids := storetest.Enqueue(t, h, urgent...)
	// Counted from the commit on: backlog delivered while the enqueue
	// ran went before the urgent events existed, and counting it would
	// charge the relay for batches it sent while the enqueue was slow.
	// Deliveries between the commit and this read are left out, a window
	// of a few milliseconds.
	before := gw.delivered()
	wait.Until(t, 2*time.Minute, "every urgent event to be final", func() (bool, error) {
		met, expired = 0, 0
		for _, id := range ids {
			rec, err := h.Store.GetEvent(ctx, id)
			if err != nil {
				return false, err
			}
			switch rec.Status {
			case outbox.StatusProcessed:
				if gw.met(id) {
					met++
				}
			case outbox.StatusExpired:
				expired++
			default:
				return false, nil
			}
		}
		return true, nil
	})
	last, urgentDone := 0, 0
	gw.mu.Lock()
	for _, id := range ids {
		if p, ok := gw.position[id]; ok {
			last, urgentDone = max(last, p), urgentDone+1
		}
	}
	gw.mu.Unlock()
	if last > 0 {
		waitedBehind = last - before - urgentDone
	}
	return met, expired, waitedBehind
}

// testEDFMeetsDeadlines: with EDF (the default), urgent events enqueued
// behind a backlog are claimed ahead of it: they wait only behind the
// batches the relay had claimed before they came (the batches in flight
// and the claim under way) and the first-in-first-out part of the claim
// that takes them. Counted in deliveries, not in time, so
// that a loaded machine does not decide it: the deadline is a minute, and
// none may expire. (StrictFIFOMissesDeadlines shows the same backlog with
// EDF off making most of them miss a 2 s deadline.)
func testEDFMeetsDeadlines(t *testing.T, h *storetest.Harness) {
	if h.NoDeadlineTiming != "" {
		t.Skip(h.NoDeadlineTiming)
	}
	met, expired, behind := drainEDFBacklog(t, h, false, time.Minute)
	// The batches in flight and the claim under way when the urgent
	// events came, and the first-in-first-out part of the claim that took
	// them (its deadline part holds all of them).
	fifo, _ := store.ClaimRequest{Limit: edfBatchSize}.FIFOSlots()
	bound := (relay.DefaultMaxBatchesInFlight+1)*edfBatchSize + fifo
	t.Logf("EDF on: %d of %d urgent events delivered, %d expired; they waited behind %d backlog events (at most %d: the batches in flight, the claim under way and the FIFO part of theirs; backlog %d at %s per request, %d at once)",
		met, edfUrgent, expired, behind, bound, edfBacklog, edfLatency, edfParallel)
	if met != edfUrgent || expired != 0 {
		t.Errorf("EDF on: %d of %d urgent events delivered in time, %d expired; want all delivered", met, edfUrgent, expired)
	}
	if behind > bound {
		t.Errorf("EDF on: the urgent events waited behind %d backlog events, want at most %d", behind, bound)
	}
}

// testStrictFIFOMissesDeadlines: with EDF off the urgent events wait
// behind the backlog, and most of them expire.
func testStrictFIFOMissesDeadlines(t *testing.T, h *storetest.Harness) {
	met, expired := runEDFBacklog(t, h, true)
	t.Logf("EDF off: %d of %d urgent events met their %s deadline, %d expired", met, edfUrgent, edfTTL, expired)
	if expired <= edfUrgent/2 {
		t.Errorf("EDF off: only %d of %d urgent events expired (%d met their deadline); want most, as they wait behind the backlog", expired, edfUrgent, met)
	}
}

// routedRecorder is a Recorder whose routes are the aggregate type's
// default destination ("payment.events").
type routedRecorder struct{ *Recorder }

func (routedRecorder) Destination(m *outbox.Message) string { return m.AggregateType + ".events" }

// testRestartReport: what passed its deadline while no relay ran is
// reported once when a relay starts: the count, the oldest and newest
// deadline, and the routes; events with time left are not counted.
func testRestartReport(t *testing.T, h *storetest.Harness) {
	rep := h.Store
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var events []outbox.Event
	for i := range 3 {
		e := storetest.PaymentEvent(fmt.Sprintf("rr-%d", i), 1)
		e.ExpiresAt = base.Add(time.Duration(i) * time.Minute)
		events = append(events, e)
	}
	m := storetest.PaymentEvent("rr-m", 1)
	m.AggregateType, m.EventType, m.ExpiresAt = "merchant", "MerchantNotified", base.Add(30*time.Minute)
	future := storetest.PaymentEvent("rr-future", 1)
	future.TTL = time.Hour
	storetest.Enqueue(t, h, append(events, m, future, storetest.PaymentEvent("rr-none", 1))...)
	o, err := rep.Overdue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o.Count != 4 || !o.Oldest.Equal(base) || !o.Newest.Equal(base.Add(30*time.Minute)) || len(o.Groups) != 2 ||
		o.Groups[0].AggregateType != "payment" || o.Groups[0].Count != 3 || o.Groups[1].EventType != "MerchantNotified" {
		t.Fatalf("Overdue = %+v; want 4 events, deadlines %s to %s, payment 3 and merchant 1", o, base, base.Add(30*time.Minute))
	}
	var logs strings.Builder
	var mu sync.Mutex
	cfg := testConfig(h, routedRecorder{&Recorder{}}, "report")
	cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	drain(t, newRelay(t, cfg), time.Minute)
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "restart report") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "count=4") || !strings.Contains(lines[0], `routes="payment.events=3 merchant.events=1"`) ||
		!strings.Contains(lines[0], "oldest_deadline="+base.UTC().Format(time.RFC3339Nano)) {
		t.Fatalf("restart report lines %q; want one with count=4, the oldest deadline and routes payment.events=3 merchant.events=1", lines)
	}
	if o, err := rep.Overdue(ctx); err != nil || o.Count != 0 {
		t.Fatalf("after the drain, Overdue = %+v, %v; want nothing left", o, err)
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// testCompensationThroughRelay: the relay retries an event until its
// deadline passes; it ends EXPIRED, never delivered, and its compensating
// event is delivered after it, once, with outbox-compensates set.
func testCompensationThroughRelay(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	e := storetest.WithCompensation(storetest.PaymentEvent("rl", 1), `{"merchant":"m-1"}`)
	e.ExpiresAt, e.TTL = time.Time{}, 500*time.Millisecond
	ids := storetest.Enqueue(t, h, e)
	rec := &Recorder{Fail: func(m outbox.Message) error {
		if m.EventType == "ApprovalRequested" {
			return errors.New("gateway unavailable")
		}
		return nil
	}}
	cfg := testConfig(h, rec, "comp")
	cfg.MaxRetries = 1000
	r := newRelay(t, cfg)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		stop()
		<-done
	}()
	compID := storetest.CompensationID(ids[0])
	wait.Until(t, 30*time.Second, "the compensating event to be delivered", func() (bool, error) {
		for _, d := range rec.Deliveries() {
			if d.EventID == compID {
				return true, nil
			}
		}
		return false, nil
	})
	n := 0
	for _, d := range rec.Deliveries() {
		switch d.EventID {
		case ids[0]:
			t.Errorf("the expired event was delivered")
		case compID:
			n++
		}
	}
	if n != 1 {
		t.Errorf("compensating event delivered %d times, want 1", n)
	}
	storetest.CheckCompensated(t, h, "rl", ids[0], `{"merchant":"m-1"}`)
}

// testMinTimeLeft: a route with min_time_left=5m never sends an event with
// 2 min left: it ends EXPIRED with the reason, and its compensating event
// goes out instead; an event with time to spare is delivered.
func testMinTimeLeft(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	short := storetest.WithCompensation(storetest.PaymentEvent("mtl-short", 1), "")
	// The short deadline is far enough for a loaded machine to claim the
	// event before it passes (the sweeper would then expire it for its
	// deadline, not for its time left), and far below the time left
	// the sink asks for.
	short.ExpiresAt, short.TTL = time.Time{}, 2*time.Minute
	long := storetest.PaymentEvent("mtl-long", 1)
	long.TTL = 10 * time.Minute
	ids := storetest.Enqueue(t, h, short, long)
	rec := &Recorder{}
	limited, err := sinkkit.Limit(rec, sinkkit.LimitConfig{Default: sinkkit.Limits{MinTimeLeft: 5 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, testConfig(h, limited, "mtl"))
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		stop()
		<-done
	}()
	compID := storetest.CompensationID(ids[0])
	wait.Until(t, 3*time.Minute, "both events and the compensation to be final", func() (bool, error) {
		for _, id := range []outbox.EventID{ids[0], ids[1], compID} {
			r, err := h.Store.GetEvent(ctx, id)
			if err != nil {
				return false, nil // the compensation may not exist yet
			}
			if !r.Status.Final() {
				return false, nil
			}
		}
		return true, nil
	})
	delivered := map[outbox.EventID]bool{}
	for _, d := range rec.Deliveries() {
		delivered[d.EventID] = true
	}
	if delivered[ids[0]] || !delivered[ids[1]] || !delivered[compID] {
		t.Fatalf("delivered: 2 min left %v, 10 min left %v, compensation %v; want false, true, true", delivered[ids[0]], delivered[ids[1]], delivered[compID])
	}
	rec0, err := h.Store.GetEvent(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if rec0.Status != outbox.StatusExpired || !strings.Contains(rec0.LastError, "not enough time left: ") || !strings.Contains(rec0.LastError, " s < 300 s") {
		t.Fatalf("the event with 2 min left: %s %q; want EXPIRED with \"not enough time left: ... s < 300 s\"", rec0.Status, rec0.LastError)
	}
	storetest.CheckCompensated(t, h, "mtl-short", ids[0], "")
}
