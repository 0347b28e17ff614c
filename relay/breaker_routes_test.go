package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/store"
)

// twoRoutes sends payment events to one HTTP sink and merchant events to
// another: two routes, each with a breaker of its own.
type twoRoutes struct{ payment, merchant *httpsink.Sink }

func (s twoRoutes) of(m *outbox.Message) *httpsink.Sink {
	if m.AggregateType == "payment" {
		return s.payment
	}
	return s.merchant
}

func (s twoRoutes) Destination(m *outbox.Message) string { return s.of(m).Destination(m) }

func (s twoRoutes) Publish(ctx context.Context, msgs []outbox.Message) []error {
	out := make([]error, len(msgs))
	for _, sk := range []*httpsink.Sink{s.payment, s.merchant} {
		var part []outbox.Message
		var pos []int
		for i := range msgs {
			if s.of(&msgs[i]) == sk {
				part, pos = append(part, msgs[i]), append(pos, i)
			}
		}
		if len(part) == 0 {
			continue
		}
		for k, err := range sk.Publish(ctx, part) {
			out[pos[k]] = err
		}
	}
	return out
}

func (s twoRoutes) Close(context.Context) error { return nil }

var _ sink.Destinations = twoRoutes{}

// routeRun is what one run of runTwoRoutes saw.
type routeRun struct {
	delivered int            // events the merchant route (always up) accepted
	rate      float64        // ... per second over the run
	p99       time.Duration  // ... commit-to-gateway latency
	sent      int            // events sent to each route
	downCalls int64          // requests the payment gateway answered 503
	failed    int64          // events that ended FAILED (dead letters)
	opened    map[string]int // route -> times its breaker opened
}

// runTwoRoutes produces perSecond events per second on each route for d
// with the payment route's gateway down, and returns what the routes saw.
func runTwoRoutes(t *testing.T, perSecond int, d time.Duration) routeRun {
	ob := newPGOutbox(t)
	pay, mer := newGateway(t), newGateway(t)
	pay.down.Store(true)
	r, err := relay.New(relay.Config{Store: ob.store, Logger: slog.New(slog.DiscardHandler),
		Sink: twoRoutes{payment: newHTTPSink(t, pay.srv.URL+"/pay"), merchant: newHTTPSink(t, mer.srv.URL+"/merchant")}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRelay(t, r)
	defer stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	perTick := perSecond / 10
	start := time.Now()
	sent, seq := 0, map[string]int{}
	for time.Since(start) < d {
		<-tick.C
		var batch []outbox.Event
		for i := range perTick {
			for _, typ := range []string{"payment", "merchant"} {
				agg := fmt.Sprintf("%s-%d", typ, i%20)
				seq[agg]++
				batch = append(batch, outbox.Event{AggregateType: typ, AggregateID: agg, EventType: "E",
					Payload: []byte(fmt.Sprintf(`{"agg":%q,"seq":%d,"at":%d}`, agg, seq[agg], time.Now().UnixNano()))})
			}
		}
		ob.enqueue(t, batch...)
		sent += perTick
	}
	waitUntil(t, time.Minute, "the merchant route to catch up", func() bool {
		n, _ := mer.figures()
		return n >= sent
	})
	elapsed := time.Since(start)
	// The down route's events keep coming back (retries, then the probes
	// of an open breaker), so its breaker opens, however slow the machine:
	// an attempt cut short by the relay's own deadline says nothing about
	// the destination (kindOf), and on a busy machine every attempt can be
	// such, so no 503 is counted.
	waitUntil(t, 3*time.Minute, "the down route's breaker to open", func() bool {
		for _, e := range ob.routeLog(t, "") {
			if e.To == store.BreakerOpen && strings.HasSuffix(e.Route, "/pay") {
				return true
			}
		}
		return false
	})
	n, violations := mer.figures()
	if violations != 0 {
		t.Errorf("%d order violations on the healthy route", violations)
	}
	st, err := ob.store.Stats(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	opened := map[string]int{}
	for _, e := range ob.routeLog(t, "") {
		if e.To == store.BreakerOpen {
			opened[e.Route]++
		}
	}
	mer.mu.Lock()
	lat := slices.Clone(mer.latencies)
	mer.mu.Unlock()
	slices.Sort(lat)
	return routeRun{delivered: n, rate: float64(n) / elapsed.Seconds(), p99: lat[len(lat)*99/100],
		sent: sent, downCalls: pay.downRequests.Load(), failed: st.Counts[outbox.StatusFailed], opened: opened}
}

// TestBreakerTwoRoutesOneDown: with one route's gateway down, that
// route's breaker opens and the other's does not, so the other route is
// delivered in full and in order while the down route's events wait
// (none ends FAILED). The healthy route's rate and latency are logged, not
// asserted: how fast it goes is a benchmark's business, not a test's.
func TestBreakerTwoRoutesOneDown(t *testing.T) {
	t.Parallel()
	run := runTwoRoutes(t, 100, 8*time.Second)
	if t.Failed() {
		return
	}
	t.Logf("healthy route: %d events, %.0f/s, p99 %s; the down gateway answered %d calls for %d events; breakers opened: %v",
		run.delivered, run.rate, run.p99.Round(time.Millisecond), run.downCalls, run.sent, run.opened)
	if run.delivered < run.sent {
		t.Errorf("the healthy route delivered %d of %d events while the other was down", run.delivered, run.sent)
	}
	if run.failed != 0 {
		t.Errorf("%d events ended FAILED while their gateway was down; want them held by the open breaker", run.failed)
	}
	payOpened, otherOpened := 0, 0
	for route, n := range run.opened {
		if strings.HasSuffix(route, "/pay") {
			payOpened += n
		} else {
			otherOpened += n
		}
	}
	if payOpened == 0 || otherOpened != 0 {
		t.Errorf("breakers opened %v; want the down route's (\".../pay\") only", run.opened)
	}
}
