package amqpsink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/internal/testenv"
)

// TestE2EBrokerDownBehindBreaker stops the RabbitMQ application of a
// private node (rabbitmqctl -n <node> stop_app) for 2 minutes (15 s with
// -short) while `outbox relay` at its default retry and breaker settings
// drains a backlog, then starts it again (start_app): the routes' breakers
// open, nothing ends FAILED, no retry is counted beyond the opening, and
// the backlog drains within 60 s of the broker's return, nothing lost, in
// order.
func TestE2EBrokerDownBehindBreaker(t *testing.T) {
	t.Parallel()
	outage := e2etest.BrokerOutage(testenv.Short())
	node := startRabbitNode(t)
	u := node.URL
	n := 2000
	ex := "outbox.brk." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	b := e2etest.NewBacklog(t, "brk_amqp", n, e2etest.Aggregates(80, 20))
	r := newQueueReader(t, u, ex, "#", true)
	ctx, cancel := context.WithTimeout(context.Background(), outage+5*time.Minute)
	defer cancel()
	// A rate limit keeps most of the backlog waiting when the broker stops.
	relay := e2etest.StartCLI(t, append(b.RelayArgs(fmt.Sprintf("%s?exchange=%s&publish_timeout=2s&reconnect_wait=100ms&rate=100/s", u, ex)),
		"--poll-interval", "1s", "--batch", "100")...)
	relay.Await(ctx, t, 100*time.Millisecond, "a first delivery", func() bool { return b.Processed(t) > 0 })
	// Frozen while rabbitmqctl stops the application (seconds on a loaded
	// machine), the relay cannot drain the rest of the backlog before the
	// broker is down.
	relay.Freeze(t)
	node.rabbitmqctl(t, "stop_app")
	down := time.Now()
	relay.Thaw(t)
	relay.Await(ctx, t, 200*time.Millisecond, "the breaker to open", func() bool { return b.BreakerOpened(t) })
	if err := e2etest.WaitOutage(ctx, outage-time.Since(down)); err != nil {
		t.Fatal(err)
	}
	node.rabbitmqctl(t, "start_app")
	if err := node.awaitAMQP(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	if err := r.connect(); err != nil {
		t.Fatal(err)
	}
	relay.Wait(ctx, t)
	b.CheckOutage(t, n, outage, time.Since(back))
	ds, err := r.deliveries(ctx, n)
	if err != nil {
		t.Fatalf("read %d of %d: %v", len(ds), n, err)
	}
	e2etest.CheckArrived(t, arrived(t, ds), b, func(typ string) string { return typ + ".events" })
}
