package relaytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/storetest"
)

// RunBreaker checks the circuit breaker at its default configuration over
// the backend, whose routes table and route log keep its state: noise
// (a destination that fails one request in five at random) never opens
// it, and a destination that hangs opens it as its requests time out,
// without a retry counted, and the backlog drains once it answers again.
func RunBreaker(t *testing.T, newHarness storetest.Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *storetest.Harness)
	}{
		{"FlakyDestinationNeverOpensTheBreaker", testFlakyDestinationStaysClosed},
		{"HangingDestinationOpensTheBreaker", testHangingDestinationOpens},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

// breakerConfig is testConfig with the breaker at its defaults and the
// relay's log kept in logs.
func breakerConfig(h *storetest.Harness, s sink.Sink, id string, logs *testenv.Buffer) relay.Config {
	cfg := testConfig(h, s, id)
	cfg.Breaker = relay.BreakerConfig{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return cfg
}

// breakerEvents enqueues perAggregate events for each of aggregates
// aggregates, interleaved (event n of every aggregate before event n+1
// of any), in transactions of at most 500 events.
func breakerEvents(t *testing.T, h *storetest.Harness, prefix string, aggregates, perAggregate int) []outbox.EventID {
	var events []outbox.Event
	for seq := 1; seq <= perAggregate; seq++ {
		for a := range aggregates {
			events = append(events, storetest.PaymentEvent(fmt.Sprintf("%s-%03d", prefix, a), seq))
		}
	}
	var ids []outbox.EventID
	for len(events) > 0 {
		n := min(len(events), 500)
		ids = append(ids, storetest.Enqueue(t, h, events[:n]...)...)
		events = events[n:]
	}
	return ids
}

// routeLog returns every route's breaker moves, oldest first.
func routeLog(t *testing.T, h *storetest.Harness) []store.RouteLogEntry {
	t.Helper()
	log, err := h.Store.RouteLog(context.Background(), "", 10000)
	if err != nil {
		t.Fatalf("route log: %v", err)
	}
	for i, j := 0, len(log)-1; i < j; i, j = i+1, j-1 {
		log[i], log[j] = log[j], log[i]
	}
	return log
}

// maxRetryCount returns the highest retry_count of the outbox's events,
// read through the store.
func maxRetryCount(t *testing.T, h *storetest.Harness) int {
	t.Helper()
	most := 0
	var before int64
	for {
		page, err := h.Store.ListEvents(context.Background(), store.ListFilter{BeforeID: before, Limit: 1000})
		if err != nil {
			t.Fatalf("list events: %v", err)
		}
		for _, r := range page {
			most = max(most, r.RetryCount)
			if before == 0 || r.ID < before {
				before = r.ID
			}
		}
		if len(page) < 1000 {
			return most
		}
	}
}

// checkNothingEnded fails the test if any event ended FAILED, BLOCKED or
// EXPIRED.
func checkNothingEnded(t *testing.T, h *storetest.Harness, why string) {
	t.Helper()
	for _, status := range []outbox.Status{outbox.StatusFailed, outbox.StatusBlocked, outbox.StatusExpired} {
		if n := storetest.CountStatus(t, h.Store, status); n != 0 {
			t.Errorf("%d events %s: %s", n, status, why)
		}
	}
}

// checkDeliveredInOrder checks that every event of ids was delivered (at
// least once), in order per aggregate, and is PROCESSED.
func checkDeliveredInOrder(t *testing.T, h *storetest.Harness, rec *Recorder, ids []outbox.EventID) {
	t.Helper()
	seen := map[outbox.EventID]bool{}
	for _, d := range rec.Deliveries() {
		seen[d.EventID] = true
	}
	missing := 0
	for _, id := range ids {
		if !seen[id] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d events never delivered", missing, len(ids))
	}
	if n := storetest.CountStatus(t, h.Store, outbox.StatusProcessed); n != int64(len(ids)) {
		t.Errorf("%d PROCESSED, want %d", n, len(ids))
	}
	if err := CheckOrder(rec.Deliveries()); err != nil {
		t.Error(err)
	}
}

// flakySink is a destination that refuses one message in five at random
// (a seeded generator) with a retryable error, and delivers the others to
// rec. It sends the keys of a call on a few workers and reports each
// result as it comes, as the HTTP sink does.
type flakySink struct {
	rec     *Recorder
	mu      sync.Mutex
	rng     *rand.Rand
	refused atomic.Int64
}

func (s *flakySink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	return sinkkit.Precheck{Sink: "flaky sink"}.SendByKey(ctx, msgs, 4, func(i int) error {
		s.mu.Lock()
		fail := s.rng.IntN(5) == 0
		s.mu.Unlock()
		if fail {
			s.refused.Add(1)
			return errors.New("flaky sink: 503 Service Unavailable: upstream busy")
		}
		return s.rec.Publish(ctx, msgs[i:i+1])[0]
	})
}

func (s *flakySink) Destination(*outbox.Message) string { return "flaky.gateway" }
func (s *flakySink) Close(ctx context.Context) error    { return s.rec.Close(ctx) }

// testFlakyDestinationStaysClosed: a destination that refuses one request
// in five at random is noise, not an outage. The relay at its default
// breaker drains 2,000 events over 40 aggregates (fewer on a slower
// backend) with a short backoff and never opens the route's breaker: the
// route log stays empty. A breaker that counted "3 faults in a row" among
// the results of one batch sent at once opened on this several times per
// run.
func testFlakyDestinationStaysClosed(t *testing.T, h *storetest.Harness) {
	const aggregates = 40
	perAggregate := max(storetest.Scaled(h, 50), 500/aggregates+1)
	ids := breakerEvents(t, h, "flaky", aggregates, perAggregate)
	rec := &Recorder{Name: "flaky"}
	fs := &flakySink{rec: rec, rng: rand.New(rand.NewPCG(39, 2))}
	var logs testenv.Buffer
	cfg := breakerConfig(h, fs, "flaky", &logs)
	// MaxRetries is raised so that no event runs out of retries by bad
	// luck (one in five to the sixth): the test is about the breaker.
	cfg.BackoffMin, cfg.BackoffMax, cfg.MaxRetries = 20*time.Millisecond, 200*time.Millisecond, 50
	cfg.PollInterval = 50 * time.Millisecond
	// Small batches: many batches end during the drain, and each end is
	// a chance for a breaker that judges faults by their place among a
	// batch's results (the last ones all faults) to open.
	cfg.BatchSize = 10
	r := newRelay(t, cfg)
	stop := runRelays(t, r)
	start := time.Now()
	wait.WhileProgressing(t, time.Minute, 10*time.Minute, "every event to be delivered", func() (bool, int64, error) {
		st, err := h.Store.Stats(context.Background(), true)
		if err != nil {
			return false, 0, err
		}
		return st.Counts[outbox.StatusProcessed] == int64(len(ids)), st.Counts[outbox.StatusProcessed], nil
	})
	took := time.Since(start)
	stop()

	moves := routeLog(t, h)
	for _, e := range moves {
		t.Logf("breaker: %s %s %s -> %s: %s", e.At.Format("15:04:05.000"), e.Route, e.From, e.To, e.Reason)
	}
	t.Logf("%d events over %d aggregates delivered in %s; %d requests refused at random, %d deliveries",
		len(ids), aggregates, took.Round(time.Millisecond), fs.refused.Load(), len(rec.Deliveries()))
	if len(moves) != 0 {
		t.Errorf("the breaker moved %d times on a destination that refuses one request in five at random; want never", len(moves))
	}
	if lines := logs.Lines("circuit breaker opened"); len(lines) != 0 {
		t.Errorf("breaker opened: %q", lines)
	}
	if n := fs.refused.Load(); n < 100 {
		t.Errorf("only %d requests were refused: the destination was not flaky", n)
	}
	checkDeliveredInOrder(t, h, rec, ids)
	checkNothingEnded(t, h, "a flaky destination must not end events")
}

// Shape of testHangingDestinationOpens.
const (
	hangTimeout   = time.Second     // the sink's own timeout per request
	hangWorkers   = 4               // requests the sink has open at once per batch
	hangLease     = 6 * time.Second // the relay publishes for 80% of it: 4.8 s
	hangBatchSize = 100
	// hangOpenBound: the first requests time out after hangTimeout, and
	// the silence rule opens the breaker once faults have come for
	// relay.DefaultBreakerFailingFor with no success, at the next fault:
	// about 3 s after the first request. The bound leaves room for a
	// loaded machine and stays well within the minute a hanging
	// destination may take to open the breaker.
	hangOpenBound = 20 * time.Second
)

// hangingSink is a destination that accepts requests and, while it
// hangs, answers none: each request waits for the sink's own timeout and
// fails with a retryable error that wraps context.DeadlineExceeded. It
// sends the keys of a call on hangWorkers workers and reports each result
// as it becomes final (sinkkit's SendByKey, as the HTTP sink does). Once
// recovered, it delivers to rec, also the requests it held.
type hangingSink struct {
	rec       *Recorder
	recovered chan struct{}
	once      sync.Once
	timedOut  atomic.Int64 // requests that ran into the timeout
}

func (s *hangingSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	return sinkkit.Precheck{Sink: "hanging sink"}.SendByKey(ctx, msgs, hangWorkers, func(i int) error {
		timer := time.NewTimer(hangTimeout)
		defer timer.Stop()
		select {
		case <-s.recovered:
		default:
			select {
			case <-s.recovered:
			case <-timer.C:
				s.timedOut.Add(1)
				return fmt.Errorf("hanging sink: no answer within %s: %w", hangTimeout, context.DeadlineExceeded)
			case <-ctx.Done():
				return fmt.Errorf("hanging sink: request abandoned: %w", ctx.Err())
			}
		}
		return s.rec.Publish(ctx, msgs[i:i+1])[0]
	})
}

func (s *hangingSink) recover() { s.once.Do(func() { close(s.recovered) }) }

func (s *hangingSink) Destination(*outbox.Message) string { return "hanging.gateway" }
func (s *hangingSink) Close(ctx context.Context) error    { return s.rec.Close(ctx) }

// testHangingDestinationOpens: a destination that hangs, the relay at its
// default breaker with a short lease, and batches that last longer than
// the relay's publish budget (100 events of 100 aggregates, 4 requests at
// once, each waiting for the sink's 1 s timeout: 25 s against 4.8 s). A
// request that exceeds its timeout is a destination fault at that
// moment: the breaker opens within hangOpenBound, the events wait PENDING
// without a retry counted, and nothing ends FAILED, BLOCKED or EXPIRED.
// Once the destination answers, a probe closes the breaker and the
// backlog drains in order. A breaker that learnt a batch's results only
// when its publish budget ran out, and took those cut short by it for
// saying nothing, never opened.
func testHangingDestinationOpens(t *testing.T, h *storetest.Harness) {
	const aggregates = hangBatchSize
	ids := breakerEvents(t, h, "hang", aggregates, max(2, storetest.Scaled(h, 6)))
	rec := &Recorder{Name: "hanging"}
	hs := &hangingSink{rec: rec, recovered: make(chan struct{})}
	t.Cleanup(hs.recover)
	var logs testenv.Buffer
	cfg := breakerConfig(h, hs, "hanging", &logs)
	cfg.Lease, cfg.BatchSize = hangLease, hangBatchSize
	if batch, budget := time.Duration(hangBatchSize/hangWorkers)*hangTimeout, hangLease*8/10; batch <= budget {
		t.Fatalf("a batch of the hanging destination lasts %s, within the publish budget %s: the test would not test the hang", batch, budget)
	}
	ctx := context.Background()
	started, err := dbClock(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, cfg)
	stop := runRelays(t, r)

	var opened store.RouteLogEntry
	wait.For(t, hangOpenBound, "the breaker to open on the hanging destination", func() bool {
		for _, e := range routeLog(t, h) {
			if e.To == store.BreakerOpen {
				opened = e
				return true
			}
		}
		return false
	})
	openedAfter := opened.At.Sub(started)
	timedOut := hs.timedOut.Load()
	t.Logf("opened %s after the relay started, %d requests timed out: %s (%s)",
		openedAfter.Round(time.Millisecond), timedOut, opened.Reason, opened.LastError)
	if opened.Route != "hanging.gateway" {
		t.Errorf("the breaker opened on route %q, want hanging.gateway", opened.Route)
	}
	if openedAfter > hangOpenBound {
		t.Errorf("the breaker opened %s after the relay started, want within %s", openedAfter.Round(time.Millisecond), hangOpenBound)
	}

	// The batches that met the hang give their events back: they wait,
	// PENDING (but a probe's), without a retry counted.
	wait.For(t, 15*time.Second, "the events to wait PENDING", func() bool {
		return storetest.CountStatus(t, h.Store, outbox.StatusPending) >= int64(len(ids))-1
	})
	if n := maxRetryCount(t, h); n != 0 {
		t.Errorf("retry_count reached %d while the destination hung, want 0 (an outage spends no retry)", n)
	}
	if snap, err := h.Store.Routes(ctx); err != nil || len(snap.Routes) != 1 || snap.Routes[0].State == store.BreakerClosed {
		t.Errorf("routes while the destination hangs: %+v, %v; want one route, not CLOSED", snap.Routes, err)
	}
	checkNothingEnded(t, h, "a hanging destination must not end events")

	hs.recover()
	recovered := time.Now()
	wait.WhileProgressing(t, 45*time.Second, 10*time.Minute, "the backlog to drain after the destination recovered", func() (bool, int64, error) {
		n := storetest.CountStatus(t, h.Store, outbox.StatusProcessed)
		return n == int64(len(ids)), n, nil
	})
	drained := time.Since(recovered)
	stop()

	for _, e := range routeLog(t, h) {
		t.Logf("breaker: %s %s %s -> %s by %s: %s", e.At.Format("15:04:05.000"), e.Route, e.From, e.To, e.Actor, e.Reason)
	}
	t.Logf("%d events over %d aggregates: opened after %s (%d requests timed out by then), drained %s after recovery; %d deliveries",
		len(ids), aggregates, openedAfter.Round(time.Millisecond), timedOut, drained.Round(time.Millisecond), len(rec.Deliveries()))
	// The relay logs the opening once the database has it: read the
	// log once the relay has stopped.
	if lines := logs.Lines("circuit breaker opened", "level=WARN", "route=hanging.gateway"); len(lines) == 0 {
		t.Errorf("no WARN names the route: %q", logs.Lines("level=WARN"))
	}
	checkDeliveredInOrder(t, h, rec, ids)
	checkNothingEnded(t, h, "a hanging destination must not end events")
	if n := maxRetryCount(t, h); n != 0 {
		t.Errorf("retry_count reached %d, want 0", n)
	}
}
