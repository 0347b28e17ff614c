package kafkasink_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/internal/testenv"
)

// TestEndToEndBrokerDownBehindBreaker stops a kfake broker for 2 minutes
// (15 s with -short) while `outbox relay` at its default retry and breaker
// settings drains a backlog, and starts it again on its port: the routes'
// breakers open, nothing ends FAILED, no retry is counted beyond the
// opening, and the backlog drains within 60 s of the broker's return,
// nothing lost, in order.
func TestEndToEndBrokerDownBehindBreaker(t *testing.T) {
	t.Parallel()
	outage := e2etest.BrokerOutage(testenv.Short())
	n := 2000
	b := e2etest.NewBacklog(t, "brk_kafka", n, e2etest.DefaultAggregates())
	topics := []string{"payment.events", "merchant.events"}
	c := newCluster(t, kfake.SeedTopics(3, topics...))
	ctx, cancel := context.WithTimeout(context.Background(), outage+4*time.Minute)
	defer cancel()
	// A rate limit keeps most of the backlog waiting when the broker stops.
	relay := e2etest.StartCLI(t, append(b.RelayArgs("kafka://"+c.addr()+"?produce_timeout=2s&rate=100/s"),
		"--poll-interval", "1s", "--batch", "100")...)
	relay.Await(ctx, t, 100*time.Millisecond, "a first delivery", func() bool { return b.Processed(t) > 0 })
	c.stop()
	down := time.Now()
	relay.Await(ctx, t, 200*time.Millisecond, "the breaker to open", func() bool { return b.BreakerOpened(t) })
	if err := e2etest.WaitOutage(ctx, outage-time.Since(down)); err != nil {
		t.Fatal(err)
	}
	if err := c.start(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	relay.Wait(ctx, t)
	b.CheckOutage(t, n, outage, time.Since(back))
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer rcancel()
	got, err := newReader(t, c.addr(), topics...).read(rctx, n)
	if err != nil {
		t.Fatal(err)
	}
	e2etest.CheckArrived(t, got, b, func(typ string) string { return typ + ".events" })
}
