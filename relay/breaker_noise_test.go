package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
)

// flakyBacklog is 2,000 events over 40 aggregates, in order per aggregate.
func flakyBacklog() []outbox.Event {
	const aggregates, perAggregate = 40, 50
	var events []outbox.Event
	for seq := 1; seq <= perAggregate; seq++ {
		for a := range aggregates {
			events = append(events, seqEvent("payment", fmt.Sprintf("f%02d", a), seq, 0))
		}
	}
	return events
}

// TestBreakerFlakyGatewayStaysClosed: a gateway that answers one request
// in five with 503, at random, is noise, not an outage. The relay at its
// default breaker drains 2,000 events over 40 aggregates (with the short
// backoff of the measurement) without ever opening the route's
// breaker: the routes audit log stays empty. The breaker once counted
// "3 attempts in a row" among the results of one batch sent at once, and
// opened on this several times per run.
func TestBreakerFlakyGatewayStaysClosed(t *testing.T) {
	t.Parallel()
	ob := newPGOutbox(t)
	gw := newGateway(t)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(39, 2))
	var refused atomic.Int64
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fail := rng.IntN(5) == 0
		mu.Unlock()
		if fail {
			refused.Add(1)
			http.Error(w, "upstream busy", http.StatusServiceUnavailable)
			return
		}
		gw.serve(w, r)
	}))
	t.Cleanup(flaky.Close)

	events := flakyBacklog()
	ob.enqueue(t, events...)
	logs := &testenv.Buffer{}
	// MaxRetries is raised so that no event runs out of retries by bad
	// luck (one in five to the sixth): the test is about the breaker.
	r, err := relay.New(relay.Config{Store: ob.store, Sink: newHTTPSink(t, flaky.URL+"/approve"),
		BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, MaxRetries: 50,
		PollInterval: 50 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	waitUntil(t, 5*time.Minute, "every event to be delivered", func() bool {
		return ob.counts(t)[outbox.StatusProcessed] == int64(len(events))
	})
	moves := ob.routeLog(t, "")
	for _, e := range moves {
		t.Logf("breaker: %s %s -> %s: %s", e.At.Format("15:04:05.000"), e.From, e.To, e.Reason)
	}
	t.Logf("%d events delivered; %d requests answered 503", len(events), refused.Load())
	if len(moves) != 0 {
		t.Errorf("the breaker moved %d times on a gateway that refuses one request in five at random; want never", len(moves))
	}
	if lines := logs.Lines("circuit breaker opened"); len(lines) != 0 {
		t.Errorf("breaker opened: %q", lines)
	}
	if refused.Load() < 100 {
		t.Errorf("only %d requests were refused: the gateway was not flaky", refused.Load())
	}
	if _, v := gw.figures(); v != 0 {
		t.Errorf("%d order violations", v)
	}
}

// hangingGateway accepts connections and reads requests but, while it
// hangs, answers none of them: every request runs into the sink's
// timeout. Then it answers as the gateway does.
type hangingGateway struct {
	*gateway
	srv     *httptest.Server
	hanging atomic.Bool
	stuck   atomic.Int64 // requests left unanswered
	release chan struct{}
	once    sync.Once
}

func newHangingGateway(t *testing.T) *hangingGateway {
	h := &hangingGateway{gateway: newGateway(t), release: make(chan struct{})}
	h.hanging.Store(true)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.hanging.Load() {
			h.stuck.Add(1)
			select {
			case <-r.Context().Done(): // the client gave up
			case <-h.release:
			}
			return // no status written for a client that gave up
		}
		h.gateway.serve(w, r)
	}))
	t.Cleanup(func() {
		h.recover()
		h.srv.Close()
	})
	return h
}

// recover makes the gateway answer again.
func (h *hangingGateway) recover() {
	h.once.Do(func() {
		h.hanging.Store(false)
		close(h.release)
	})
}

// TestBreakerHangingGatewayOpens: a gateway that accepts TCP and never
// answers, 1,000 events over 200 aggregates, the relay at every default
// (10 s HTTP timeout, 16 requests at once, 2 m lease). A request that
// exceeds its timeout is a destination fault at that moment: the breaker
// opens within a minute, with a WARN naming the route, and the events
// wait PENDING without a retry counted; none ends FAILED, BLOCKED or
// EXPIRED. Once the gateway answers again, a probe closes the breaker and
// the backlog drains. Before, the batch's results came only when its
// publish budget (96 s) ran out, and the breaker counted those cut short
// by it as saying nothing: it never opened while the gateway hung.
func TestBreakerHangingGatewayOpens(t *testing.T) {
	t.Parallel()
	ob := newPGOutbox(t)
	gw := newHangingGateway(t)
	const aggregates, perAggregate = 200, 5
	var events []outbox.Event
	for seq := 1; seq <= perAggregate; seq++ {
		for a := range aggregates {
			events = append(events, seqEvent("payment", fmt.Sprintf("h%03d", a), seq, 0))
		}
	}
	ob.enqueue(t, events...)
	logs := &testenv.Buffer{}
	r, err := relay.New(relay.Config{Store: ob.store, Sink: newHTTPSink(t, gw.srv.URL+"/approve"),
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRelay(t, r)
	started := time.Now()

	var opened store.RouteLogEntry
	waitUntil(t, 3*time.Minute, "the breaker to open", func() bool {
		for _, e := range ob.routeLog(t, "") {
			if e.To == store.BreakerOpen {
				opened = e
				return true
			}
		}
		return false
	})
	openedAfter := time.Since(started)
	t.Logf("opened after %s: %s (%s)", openedAfter.Round(time.Millisecond), opened.Reason, opened.LastError)
	if openedAfter > time.Minute {
		t.Errorf("the breaker opened %s after the gateway began to hang, want within a minute", openedAfter.Round(time.Second))
	}
	// The batch that met the hang gives its events back: they wait,
	// PENDING (but a probe's), without a retry counted.
	waitUntil(t, 3*time.Minute, "the events to wait PENDING", func() bool {
		c := ob.counts(t)
		return c[outbox.StatusPending] >= int64(len(events))-1
	})
	if n := ob.scalar(t, `SELECT COALESCE(max(retry_count), 0) FROM %s`); n != 0 {
		t.Errorf("retry_count reached %d while the gateway hung, want 0 (an outage spends no retry)", n)
	}
	if snap, err := ob.store.Routes(context.Background()); err != nil || len(snap.Routes) != 1 || snap.Routes[0].State == store.BreakerClosed {
		t.Errorf("routes while the gateway hangs: %+v, %v; want one route, not CLOSED", snap.Routes, err)
	}

	gw.recover()
	recovered := time.Now()
	waitUntil(t, 3*time.Minute, "the backlog to drain after the gateway recovered", func() bool {
		return ob.counts(t)[outbox.StatusProcessed] == int64(len(events))
	})
	drain := time.Since(recovered)
	stop()
	// The relay logs the opening just after the database records it: the
	// log is read once the relay has stopped.
	warned := false
	for _, l := range logs.Lines("circuit breaker opened") {
		warned = warned || (strings.Contains(l, "level=WARN") && strings.Contains(l, "route="+opened.Route))
	}
	if !warned {
		t.Errorf("no WARN names the route %s: %q", opened.Route, logs.Lines("level=WARN"))
	}
	c := ob.counts(t)
	accepted, violations := gw.figures()
	t.Logf("hang: %d requests left unanswered; opened after %s; drained %s after recovery; %v; max retry_count %d",
		gw.stuck.Load(), openedAfter.Round(time.Millisecond), drain.Round(time.Millisecond), c,
		ob.scalar(t, `SELECT COALESCE(max(retry_count), 0) FROM %s`))
	for _, e := range ob.routeLog(t, "") {
		t.Logf("breaker: %s %s -> %s by %s: %s", e.At.Format("15:04:05.000"), e.From, e.To, e.Actor, e.Reason)
	}
	if c[outbox.StatusFailed]+c[outbox.StatusBlocked]+c[outbox.StatusExpired] != 0 {
		t.Errorf("FAILED %d, BLOCKED %d, EXPIRED %d: a hanging gateway must not end events", c[outbox.StatusFailed], c[outbox.StatusBlocked], c[outbox.StatusExpired])
	}
	if accepted != len(events) || violations != 0 {
		t.Errorf("gateway accepted %d of %d, %d order violations", accepted, len(events), violations)
	}
	if n := ob.scalar(t, `SELECT COALESCE(max(retry_count), 0) FROM %s`); n != 0 {
		t.Errorf("retry_count reached %d, want 0", n)
	}
}

// TestBreakerOpensCountPersists: the OPENS of a route count its outages
// for good: two outages, each closed again by a probe, leave 2 (the
// count once started again at 0 when the breaker closed).
func TestBreakerOpensCountPersists(t *testing.T) {
	t.Parallel()
	ob := newPGOutbox(t)
	gw := newGateway(t)
	r, err := relay.New(relay.Config{Store: ob.store, Sink: newHTTPSink(t, gw.srv.URL+"/approve"),
		PollInterval: 50 * time.Millisecond, BackoffMin: 50 * time.Millisecond, BackoffMax: 100 * time.Millisecond, MaxRetries: 100,
		Breaker: relay.BreakerConfig{OpenMin: 200 * time.Millisecond, OpenMax: 400 * time.Millisecond, Refresh: 50 * time.Millisecond},
		Logger:  slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, r)
	delivered := 0
	for outage := 1; outage <= 2; outage++ {
		gw.down.Store(true)
		var events []outbox.Event
		for a := range 30 {
			events = append(events, seqEvent("payment", fmt.Sprintf("o%02d", a), outage, 0))
		}
		ob.enqueue(t, events...)
		waitUntil(t, 3*time.Minute, fmt.Sprintf("outage %d to open the breaker", outage), func() bool {
			snap, err := ob.store.Routes(context.Background())
			return err == nil && len(snap.Routes) == 1 && snap.Routes[0].State != store.BreakerClosed
		})
		gw.down.Store(false)
		delivered += len(events)
		waitUntil(t, 3*time.Minute, fmt.Sprintf("outage %d to end: breaker closed, events delivered", outage), func() bool {
			snap, err := ob.store.Routes(context.Background())
			return err == nil && snap.Routes[0].State == store.BreakerClosed &&
				ob.counts(t)[outbox.StatusProcessed] == int64(delivered)
		})
		snap, err := ob.store.Routes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := snap.Routes[0].Opens; got != outage {
			t.Errorf("after outage %d, closed again: OPENS %d, want %d", outage, got, outage)
		}
	}
}
