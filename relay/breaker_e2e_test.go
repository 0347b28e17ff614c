package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/store"
)

// runRelay starts r and returns a function that stops it and waits.
func runRelay(t *testing.T, r *relay.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("relay: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newHTTPSink(t *testing.T, url string) *httpsink.Sink {
	t.Helper()
	s, err := httpsink.New(httpsink.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// TestBreakerHTTPGatewayDownAtDefaults: a gateway answers 503 to
// everything for 3 minutes (20 s with -short) while the relay, at its
// default settings, holds a backlog of 2,000 events over 200 aggregates and
// a trickle arrives. Nothing may end FAILED or BLOCKED, nothing is lost,
// order holds, the backlog drains after recovery, and the events
// whose deadline passed during the outage end EXPIRED saying why.
func TestBreakerHTTPGatewayDownAtDefaults(t *testing.T) {
	t.Parallel()
	outage := 3 * time.Minute
	if testenv.Short() {
		outage = 20 * time.Second
	}
	ob := newPGOutbox(t)
	gw := newGateway(t)
	gw.down.Store(true)

	const aggregates, perAggregate = 200, 10
	seq := map[string]int{}
	var backlog []outbox.Event
	withTTL := 0
	for range perAggregate {
		for a := range aggregates {
			agg := fmt.Sprintf("a%03d", a)
			seq[agg]++
			ttl := time.Duration(0)
			if a%20 == 0 { // 10 aggregates whose events must not outlive a third of the outage
				ttl = outage / 3
				withTTL++
			}
			backlog = append(backlog, seqEvent("payment", agg, seq[agg], ttl))
		}
	}
	ob.enqueue(t, backlog...)
	enqueued := len(backlog)

	logs := &testenv.Buffer{}
	// Default settings but one: the sweeper runs every 45s, not 5s. The
	// sweeper does not know a route's state, so what it expires says
	// "deadline was", not "destination unavailable since"; the relay
	// looks again at events near their deadline so that it, not the
	// sweeper, ends them with the reason (asserted below). On a loaded
	// machine the relay's claims are slow, and frequent sweeps would end
	// many of the events first, as would a sweep that happened to come
	// just after the deadlines.
	// The deadlines fall about 60s after the start, so sweeps at 0, 45
	// and 90s leave the relay half a minute; the sweeper still reaps.
	r, err := relay.New(relay.Config{Store: ob.store, Sink: newHTTPSink(t, gw.srv.URL+"/approve"), SweepInterval: 45 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRelay(t, r)
	started := time.Now()

	// The trickle: one event every 500 ms to an aggregate without a deadline.
	trickleDone := make(chan struct{})
	var trickleWG sync.WaitGroup
	trickleWG.Add(1)
	trickled := 0
	go func() {
		defer trickleWG.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-trickleDone:
				return
			case <-tick.C:
			}
			a := rng.IntN(aggregates)
			if a%20 == 0 {
				a++
			}
			agg := fmt.Sprintf("a%03d", a)
			seq[agg]++
			ob.enqueue(t, seqEvent("payment", agg, seq[agg], 0))
			trickled++
		}
	}()

	waitUntil(t, time.Minute, "the breaker to open", func() bool {
		for _, e := range ob.routeLog(t, "") {
			if e.To == store.BreakerOpen {
				return true
			}
		}
		return false
	})
	openedAfter := time.Since(started)
	outageEnd := time.NewTimer(outage - time.Since(started))
	<-outageEnd.C
	maxRetriesDuringOutage := ob.scalar(t, `SELECT COALESCE(max(retry_count), 0) FROM %s`)
	gw.down.Store(false)
	recovered := time.Now()
	close(trickleDone)
	trickleWG.Wait()
	enqueued += trickled

	// The deadline is a bound for a breaker that stays open, not a speed
	// test: a probe comes within 30 s at the defaults and the drain takes
	// about 20 s (logged below).
	waitUntil(t, 3*time.Minute, "the backlog to drain after recovery", func() bool {
		c := ob.counts(t)
		return c[outbox.StatusPending]+c[outbox.StatusProcessing]+c[outbox.StatusBlocked] == 0
	})
	drain := time.Since(recovered)
	stop()

	c := ob.counts(t)
	accepted, violations := gw.figures()
	lost := int64(enqueued) - c[outbox.StatusProcessed] - c[outbox.StatusExpired]
	withReason := ob.scalar(t, `SELECT count(*) FROM %s WHERE status = 'EXPIRED' AND last_error LIKE '%%destination unavailable since%%'`)
	reasons := map[string]int{}
	rows, err := ob.pool.Query(context.Background(), `SELECT left(last_error, 70), count(*) FROM "`+ob.store.Table()+`" WHERE status = 'EXPIRED' GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r string
		var n int
		if err := rows.Scan(&r, &n); err != nil {
			t.Fatal(err)
		}
		reasons[r] = n
	}
	rows.Close()
	t.Logf("EXPIRED reasons: %v", reasons)
	for _, l := range logs.Lines("level=WARN") {
		t.Logf("relay: %.300s", l)
	}
	for _, e := range ob.routeLog(t, "") {
		t.Logf("breaker: %s %s -> %s by %s: %s", e.At.Format("15:04:05.000"), e.From, e.To, e.Actor, e.Reason)
	}
	opens := 0
	for _, e := range ob.routeLog(t, "") {
		if e.To == store.BreakerOpen {
			opens++
		}
	}
	t.Logf("outage %s: enqueued %d (backlog 2000 + trickle %d); breaker opened after %s, %d openings (incl. failed probes); requests during the outage %d; "+
		"delivered %d, FAILED %d, BLOCKED %d, EXPIRED %d (%d saying destination unavailable), lost %d, order violations %d; max retry_count %d; drained %s after recovery",
		outage, enqueued, trickled, openedAfter.Round(time.Millisecond), opens, gw.downRequests.Load(),
		c[outbox.StatusProcessed], c[outbox.StatusFailed], c[outbox.StatusBlocked], c[outbox.StatusExpired], withReason,
		lost, violations, maxRetriesDuringOutage, drain.Round(time.Millisecond))

	if c[outbox.StatusFailed] != 0 || c[outbox.StatusBlocked] != 0 {
		t.Errorf("FAILED %d, BLOCKED %d: an outage must not fail events", c[outbox.StatusFailed], c[outbox.StatusBlocked])
	}
	if lost != 0 {
		t.Errorf("%d events lost", lost)
	}
	if int64(accepted) != c[outbox.StatusProcessed] {
		t.Errorf("gateway accepted %d events, the outbox says %d PROCESSED", accepted, c[outbox.StatusProcessed])
	}
	if violations != 0 {
		t.Errorf("%d order violations", violations)
	}
	if c[outbox.StatusExpired] != int64(withTTL) {
		t.Errorf("EXPIRED %d, want the %d events whose deadline passed during the outage", c[outbox.StatusExpired], withTTL)
	}
	if withReason*10 < c[outbox.StatusExpired]*9 {
		t.Errorf("%d of %d EXPIRED events say the destination was unavailable, want at least 90%% (reasons %v)", withReason, c[outbox.StatusExpired], reasons)
	}
	if maxRetriesDuringOutage > 1 {
		t.Errorf("an event's retry_count reached %d during the outage: the breaker should stop the count after at most one", maxRetriesDuringOutage)
	}
	if opens == 0 || len(logs.Lines("circuit breaker opened")) == 0 || len(logs.Lines("circuit breaker closed")) == 0 {
		t.Errorf("the breaker's opening and closing are not in the log and audit trail (%d openings)", opens)
	}
}

// TestBreakerPoisonEventStaysClosed: on a healthy route a permanent 400
// still fails its event at once, and the breaker, even at its most
// sensitive, does not open.
func TestBreakerPoisonEventStaysClosed(t *testing.T) {
	t.Parallel()
	ob := newPGOutbox(t)
	gw := newGateway(t)
	gw.poison.Store("payment/poison", true)
	var events []outbox.Event
	for i := 1; i <= 10; i++ {
		for a := range 5 {
			events = append(events, seqEvent("payment", fmt.Sprintf("ok%d", a), i, 0))
		}
	}
	events = append(events, seqEvent("payment", "poison", 1, 0))
	ob.enqueue(t, events...)
	logs := &testenv.Buffer{}
	r, err := relay.New(relay.Config{Store: ob.store, Sink: newHTTPSink(t, gw.srv.URL+"/approve"),
		Logger:  slog.New(slog.NewTextHandler(logs, nil)),
		Breaker: relay.BreakerConfig{FailingFor: 100 * time.Millisecond, MinAttempts: 1, FailureRatio: 0.01}})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	waitUntil(t, time.Minute, "the poison event to fail and the rest to be delivered", func() bool {
		c := ob.counts(t)
		return c[outbox.StatusFailed] == 1 && c[outbox.StatusProcessed] == int64(len(events)-1)
	})
	if n := ob.scalar(t, `SELECT retry_count FROM %s WHERE status = 'FAILED'`); n != 1 {
		t.Errorf("the poison event FAILED after %d attempts, want 1 (at once)", n)
	}
	snap, err := ob.store.Routes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range snap.Routes {
		if rt.State != store.BreakerClosed {
			t.Errorf("route %s is %s after an event fault", rt.Name, rt.State)
		}
	}
	if log := ob.routeLog(t, ""); len(log) != 0 {
		t.Errorf("the breaker moved on an event fault: %+v", log)
	}
	if lines := logs.Lines("circuit breaker"); len(lines) != 0 {
		t.Errorf("breaker log lines on an event fault: %q", lines)
	}
}

// TestBreakerTwoRelaysShareOneBreaker: while the route is open, neither of
// two relays sends to it, except the one probe at a time that one of them
// takes.
func TestBreakerTwoRelaysShareOneBreaker(t *testing.T) {
	t.Parallel()
	ob := newPGOutbox(t)
	gw := newGateway(t)
	gw.down.Store(true)
	seq := map[string]int{}
	var events []outbox.Event
	for range 10 {
		for a := range 30 {
			agg := fmt.Sprintf("b%02d", a)
			seq[agg]++
			events = append(events, seqEvent("payment", agg, seq[agg], 0))
		}
	}
	ob.enqueue(t, events...)
	cfg := relay.BreakerConfig{OpenMin: 500 * time.Millisecond, OpenMax: time.Second, Refresh: 100 * time.Millisecond}
	var relays []*relay.Relay
	for i := range 2 {
		r, err := relay.New(relay.Config{Store: ob.store, Sink: newHTTPSink(t, gw.srv.URL+"/approve"), RelayID: fmt.Sprintf("relay-%d", i),
			BatchSize: 50, PollInterval: 50 * time.Millisecond, Breaker: cfg, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		relays = append(relays, r)
		runRelay(t, r)
	}
	var openedAt time.Time
	waitUntil(t, time.Minute, "the breaker to open", func() bool {
		for _, e := range ob.routeLog(t, "") {
			if e.To == store.BreakerOpen {
				openedAt = e.At
				return true
			}
		}
		return false
	})
	// Both relays have seen it open once a refresh and the batch in flight
	// are behind them; then watch until three probes have been taken (one
	// a second at most: about three seconds on a quiet machine, longer on
	// a loaded one, where claims are slower). Every request from then on
	// must be a probe's: a probe taken since the breaker opened sends one.
	from := openedAt.Add(2 * time.Second)
	var probes int
	var probers map[string]bool
	var to time.Time
	waitUntil(t, 3*time.Minute, "three probes of the open breaker", func() bool {
		to = time.Now()
		probes, probers = 0, map[string]bool{}
		for _, e := range ob.routeLog(t, "") {
			if e.To == store.BreakerHalfOpen && !e.At.Before(openedAt) {
				probes++
				if e.At.After(from) {
					probers[e.Actor] = true
				}
			}
		}
		return len(probers) > 0 && probes >= 3 && to.After(from)
	})
	requests := gw.requestsBetween(from, to)
	t.Logf("in %s while open: %d requests; %d probes taken since it opened (after the first 2s by %v)", to.Sub(from), requests, probes, probers)
	if requests > probes {
		t.Errorf("%d requests reached the destination while its breaker was open, but only %d probes were taken", requests, probes)
	}
	if n := ob.scalar(t, `SELECT COALESCE(max(retry_count), 0) FROM %s`); n > 1 {
		t.Errorf("retry_count reached %d while open", n)
	}
	gw.down.Store(false)
	waitUntil(t, time.Minute, "every event to be delivered", func() bool {
		return ob.counts(t)[outbox.StatusProcessed] == int64(len(events))
	})
	if _, v := gw.figures(); v != 0 {
		t.Errorf("%d order violations", v)
	}
	if c := ob.counts(t); c[outbox.StatusFailed] != 0 {
		t.Errorf("%d FAILED", c[outbox.StatusFailed])
	}
	if log := ob.routeLog(t, ""); log[len(log)-1].To != store.BreakerClosed {
		t.Errorf("last transition %+v, want CLOSED", log[len(log)-1])
	}
}
