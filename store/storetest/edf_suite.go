package storetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// claimWith claims with the given request fields on top of the suite's defaults.
func claimWith(t testing.TB, s store.Store, req store.ClaimRequest) *store.Claim {
	t.Helper()
	req.RelayID, req.Lease, req.FailedBlocks = "test", time.Minute, true
	c, err := s.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return c
}

// claimedAggregates returns the aggregate ids of a claim, sorted.
func claimedAggregates(c *store.Claim) []string {
	out := make([]string, len(c.Events))
	for i, e := range c.Events {
		out[i] = e.AggregateID
	}
	sort.Strings(out)
	return out
}

func names(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%03d", prefix, i))
	}
	sort.Strings(out)
	return out
}

// deadlineEvent is an event of its own aggregate with a TTL.
func deadlineEvent(aggregateID string, ttl time.Duration) outbox.Event {
	e := ev(aggregateID, 1)
	e.TTL = ttl
	return e
}

// testEDFClaimShare: a claim takes its FIFO share of the oldest events in
// id order and the rest by nearest deadline; strict FIFO and other shares
// do what they say.
func testEDFClaimShare(t *testing.T, h *Harness) {
	var fifo, edf []outbox.Event
	for i := range 60 {
		fifo = append(fifo, ev(fmt.Sprintf("fifo-%03d", i), 1))
	}
	enqueue(t, h, fifo...)
	// Enqueued latest-deadline first, so that id order is not deadline order.
	for i := 29; i >= 0; i-- {
		edf = append(edf, deadlineEvent(fmt.Sprintf("edf-%03d", i), time.Hour+time.Duration(i)*time.Second))
	}
	enqueue(t, h, edf...)

	c := claimWith(t, h.Store, store.ClaimRequest{Limit: 20})
	want := append(names("edf", 0, 10), names("fifo", 0, 10)...)
	if got := claimedAggregates(c); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("default claim of 20 took %v\nwant the 10 oldest and the 10 nearest deadlines %v", got, want)
	}
	c = claimWith(t, h.Store, store.ClaimRequest{Limit: 20, StrictFIFO: true})
	if got, want := claimedAggregates(c), names("fifo", 10, 30); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("strict FIFO claim of 20 took %v, want %v", got, want)
	}
	c = claimWith(t, h.Store, store.ClaimRequest{Limit: 20, FIFOShare: 0.25})
	want = append(names("edf", 10, 25), names("fifo", 30, 35)...)
	if got := claimedAggregates(c); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("claim of 20 with a FIFO share of 0.25 took %v, want %v", got, want)
	}
	// Fewer deadline events than slots: the rest of the claim is FIFO.
	c = claimWith(t, h.Store, store.ClaimRequest{Limit: 20})
	want = append(names("edf", 25, 30), names("fifo", 35, 50)...)
	sort.Strings(want)
	if got := claimedAggregates(c); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("claim of 20 with 5 deadline events left took %v, want %v", got, want)
	}
	if _, err := h.Store.Claim(context.Background(), store.ClaimRequest{RelayID: "t", Limit: 5, Lease: time.Minute, FIFOShare: 1.5}); err == nil ||
		!strings.Contains(err.Error(), "FIFO share") {
		t.Errorf("a FIFO share of 1.5 gave %v, want an error naming the FIFO share", err)
	}
}

// testEDFKeepsAggregateOrder: an aggregate whose later event has the
// nearest deadline is preferred, but only through its head: the deadline
// event never goes before the earlier events of its aggregate.
func testEDFKeepsAggregateOrder(t *testing.T, h *Harness) {
	var backlog []outbox.Event
	for i := range 30 {
		backlog = append(backlog, ev(fmt.Sprintf("fifo-%03d", i), 1))
	}
	enqueue(t, h, backlog...)
	// ord: a head without a deadline, then a second head-less event, then
	// the one with the nearest deadline of all.
	enqueue(t, h, ev("ord", 1), ev("ord", 2), deadlineEvent("ord", time.Hour))
	c := claimWith(t, h.Store, store.ClaimRequest{Limit: 4})
	var ord []int64
	for _, e := range c.Events {
		if e.AggregateID == "ord" {
			ord = append(ord, e.ID)
		}
	}
	got := claimedAggregates(c)
	if len(ord) == 0 || !strings.Contains(strings.Join(got, ","), "fifo-000,fifo-001") {
		t.Fatalf("claim of 4 took %v: want fifo-000, fifo-001 and the head of ord (its later event has the nearest deadline)", got)
	}
	rec, err := h.Store.ListEvents(context.Background(), store.ListFilter{AggregateType: "payment", AggregateID: "ord"})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(rec, func(i, j int) bool { return rec[i].ID < rec[j].ID })
	for i, id := range ord {
		if id != rec[i].ID {
			t.Fatalf("claimed ord rows %v, want a prefix of its rows in id order (%d, %d, %d)", ord, rec[0].ID, rec[1].ID, rec[2].ID)
		}
	}
}

// testEDFFairness: under a constant stream of events with near deadlines,
// events without one still get their share of every claim (the documented
// bound: store.DefaultFIFOShare of each claim).
func testEDFFairness(t *testing.T, h *Harness) {
	var backlog []outbox.Event
	for i := range 100 {
		backlog = append(backlog, ev(fmt.Sprintf("fifo-%03d", i), 1))
	}
	enqueue(t, h, backlog...)
	const limit = 20
	minShare := int(float64(limit) * store.DefaultFIFOShare)
	for round := range 8 {
		// More deadline events than a claim can take arrive every round.
		var stream []outbox.Event
		for i := range limit * 2 {
			stream = append(stream, deadlineEvent(fmt.Sprintf("qr-%d-%02d", round, i), time.Minute))
		}
		enqueue(t, h, stream...)
		c := claimWith(t, h.Store, store.ClaimRequest{Limit: limit})
		n := 0
		for _, e := range c.Events {
			if strings.HasPrefix(e.AggregateID, "fifo-") {
				n++
			}
		}
		if len(c.Events) != limit || n < minShare {
			t.Fatalf("round %d: claim took %d events, %d without a deadline; want %d, at least %d without", round, len(c.Events), n, limit, minShare)
		}
		complete(t, h.Store, c, true, outcomes(c, store.Delivered))
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
}

func newGateway(latency time.Duration, parallel int) *gateway {
	return &gateway{latency: latency, parallel: make(chan struct{}, parallel),
		finished: map[outbox.EventID]time.Time{}, deadline: map[outbox.EventID]time.Time{}}
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
func runEDFBacklog(t *testing.T, h *Harness, strictFIFO bool) (met, expired int) {
	if h.NoDeadlineTiming != "" {
		t.Skip(h.NoDeadlineTiming)
	}
	ctx := context.Background()
	for start := 0; start < edfBacklog; start += 1000 {
		var chunk []outbox.Event
		for i := start; i < start+1000; i++ {
			chunk = append(chunk, ev(fmt.Sprintf("backlog-%04d", i), 1))
		}
		enqueue(t, h, chunk...)
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
	waitFor(t, time.Minute, "the relay to start on the backlog", func() (bool, error) { return gw.delivered() >= 200, nil })
	var urgent []outbox.Event
	for i := range edfUrgent {
		urgent = append(urgent, deadlineEvent(fmt.Sprintf("qr-%03d", i), edfTTL))
	}
	ids := enqueue(t, h, urgent...)
	waitFor(t, 2*time.Minute, "every urgent event to be final", func() (bool, error) {
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
	return met, expired
}

// testEDFMeetsDeadlines: with EDF (the default), at least 95 of the 100
// urgent events are delivered before their deadline.
func testEDFMeetsDeadlines(t *testing.T, h *Harness) {
	met, expired := runEDFBacklog(t, h, false)
	t.Logf("EDF on: %d of %d urgent events met their %s deadline, %d expired (backlog %d at %s per request, %d at once)",
		met, edfUrgent, edfTTL, expired, edfBacklog, edfLatency, edfParallel)
	if met < 95 {
		t.Errorf("EDF on: %d of %d urgent events met their deadline, want at least 95 (%d expired)", met, edfUrgent, expired)
	}
}

// testStrictFIFOMissesDeadlines: with EDF off the urgent events wait
// behind the backlog, and most of them expire.
func testStrictFIFOMissesDeadlines(t *testing.T, h *Harness) {
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
func testRestartReport(t *testing.T, h *Harness) {
	rep, ok := h.Store.(store.OverdueReporter)
	if !ok {
		t.Skip("the store does not implement store.OverdueReporter")
	}
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var events []outbox.Event
	for i := range 3 {
		e := ev(fmt.Sprintf("rr-%d", i), 1)
		e.ExpiresAt = base.Add(time.Duration(i) * time.Minute)
		events = append(events, e)
	}
	m := ev("rr-m", 1)
	m.AggregateType, m.EventType, m.ExpiresAt = "merchant", "MerchantNotified", base.Add(30*time.Minute)
	future := ev("rr-future", 1)
	future.TTL = time.Hour
	enqueue(t, h, append(events, m, future, ev("rr-none", 1))...)
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
