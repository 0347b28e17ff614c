package natssink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/internal/testenv"
)

// TestE2EServerDownBehindBreaker stops a private JetStream server for 2
// minutes (15 s with -short) while `outbox relay` at its default retry and
// breaker settings drains a backlog: the route's breaker opens, nothing
// ends FAILED, no retry is counted beyond the opening, and once the server
// is back the backlog drains within 60 s, in order, with no event in the
// stream twice.
//
// A publish that the server stored but whose PubAck the stop lost is sent
// again after the outage, and the stream drops that repeat only within its
// duplicate window (2 minutes by default, as long as the outage): the test
// creates the stream the sink would, with a window longer than the whole
// test, as a deployment that rides out long outages without repeats does.
func TestE2EServerDownBehindBreaker(t *testing.T) {
	t.Parallel()
	outage := e2etest.BrokerOutage(testenv.Short())
	e := startPrivate(t)
	n := 2000
	b := e2etest.NewBacklog(t, "brk_nats", n, e2etest.Aggregates(80, 20))
	_, js := jsClient(t, e.URL)
	ctx, cancel := context.WithTimeout(context.Background(), outage+4*time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       "OUTBOX",
		Subjects:   []string{"payment.events", "merchant.events"},
		Duplicates: outage + 5*time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	// A rate limit keeps most of the backlog waiting when the server stops.
	relay := e2etest.StartCLI(t, append(b.RelayArgs(e.URL+"?reconnect_wait=50ms&rate=100/s"), "--poll-interval", "1s", "--batch", "100")...)
	relay.Await(ctx, t, 20*time.Millisecond, fmt.Sprintf("%d events in the stream", n/10), func() bool {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		defer scancel()
		st, err := js.Stream(sctx, "OUTBOX")
		return err == nil && st.CachedInfo().State.Msgs >= uint64(n/10)
	})
	e.stop()
	down := time.Now()
	relay.Await(ctx, t, 200*time.Millisecond, "the breaker to open", func() bool { return b.BreakerOpened(t) })
	if err := e2etest.WaitOutage(ctx, outage-time.Since(down)); err != nil {
		t.Fatal(err)
	}
	if err := e.restart(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	relay.Wait(ctx, t)
	b.CheckOutage(t, n, outage, time.Since(back))
	checkDelivered(t, readStream(t, js, "OUTBOX"), b, func(typ string) string { return typ + ".events" })
}
