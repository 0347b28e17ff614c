package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/httpsink"
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

// routeRun is what the healthy route saw in one run.
type routeRun struct {
	delivered int
	rate      float64 // events accepted per second over the run
	p99       time.Duration
}

// runTwoRoutes produces perSecond events per second on each route for d
// and returns what the merchant route (always up) saw; the payment route's
// gateway is down when paymentDown.
func runTwoRoutes(t *testing.T, paymentDown bool, perSecond int, d time.Duration) routeRun {
	ob := newPGOutbox(t)
	pay, mer := newGateway(t), newGateway(t)
	pay.down.Store(paymentDown)
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
	n, violations := mer.figures()
	if violations != 0 {
		t.Errorf("%d order violations on the healthy route", violations)
	}
	mer.mu.Lock()
	lat := slices.Clone(mer.latencies)
	mer.mu.Unlock()
	slices.Sort(lat)
	return routeRun{delivered: n, rate: float64(n) / elapsed.Seconds(), p99: lat[len(lat)*99/100]}
}

// TestBreakerTwoRoutesOneDown: with one route's gateway down (its breaker
// open), the other route's delivery rate and p99 latency stay close to a
// run with both up. The two runs go side by side, on outboxes of their
// own, so that they share whatever else loads the machine; the bounds are
// loose (a shared 2-core machine) and the figures are logged.
func TestBreakerTwoRoutesOneDown(t *testing.T) {
	t.Parallel()
	const perSecond, d = 100, 8 * time.Second
	var up, down routeRun
	t.Run("side by side", func(t *testing.T) {
		t.Run("both up", func(t *testing.T) { t.Parallel(); up = runTwoRoutes(t, false, perSecond, d) })
		t.Run("one down", func(t *testing.T) { t.Parallel(); down = runTwoRoutes(t, true, perSecond, d) })
	})
	if t.Failed() {
		return
	}
	t.Logf("healthy route, both up: %d events, %.0f/s, p99 %s; other route down: %d events, %.0f/s, p99 %s",
		up.delivered, up.rate, up.p99.Round(time.Millisecond), down.delivered, down.rate, down.p99.Round(time.Millisecond))
	if down.rate < 0.6*up.rate {
		t.Errorf("healthy route's rate fell from %.0f/s to %.0f/s while the other was down", up.rate, down.rate)
	}
	if down.p99 > 2*up.p99+500*time.Millisecond {
		t.Errorf("healthy route's p99 rose from %s to %s while the other was down", up.p99, down.p99)
	}
}
