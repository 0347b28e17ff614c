package amqpsink_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// The end-to-end tests drive the real CLI: migrate and enqueue into
// PostgreSQL, `outbox relay --drain --sink amqp://...`, then read the
// messages back from a queue bound to the test's own exchange.

// TestMain fails the package's tests if a goroutine they started is
// still running once they all passed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// arrived converts deliveries for e2etest.CheckArrived, checking that
// each carries its event id as its AMQP message-id too.
func arrived(t *testing.T, ds []amqp.Delivery) []sinktest.Received {
	t.Helper()
	out := make([]sinktest.Received, len(ds))
	for i, d := range ds {
		if out[i] = received(d); out[i].EventID == "" || d.MessageId != out[i].EventID {
			t.Fatalf("message without the event id (header %q, message-id %q)", out[i].EventID, d.MessageId)
		}
	}
	return out
}

// TestE2EDrain drains 2000 events over payment and merchant aggregates to
// an exchange of this test: payment events with routing key
// payment.events, merchant events on the override merchant.audit.
func TestE2EDrain(t *testing.T) {
	t.Parallel()
	u := brokerURL(t)
	ex := "outbox.e2e." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	b := e2etest.NewBacklog(t, "e2e_amqp", 2000, e2etest.Aggregates(30, 10))
	// The queue is bound before the relay runs: until then, every event
	// would be returned as unroutable (and retried).
	r := newQueueReader(t, u, ex, "#", true)
	e2etest.RunCLI(t, "", b.RelayArgs(u+"?exchange="+ex, "--route", "merchant=merchant.audit")...)
	if n := b.Processed(t); n != len(b.Events) {
		t.Fatalf("%d of %d events PROCESSED after the drain", n, len(b.Events))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ds, err := r.deliveries(ctx, len(b.Events))
	if err != nil {
		t.Fatalf("read %d of %d: %v", len(ds), len(b.Events), err)
	}
	if dups := e2etest.CheckArrived(t, arrived(t, ds), b, func(typ string) string {
		if typ == "merchant" {
			return "merchant.audit"
		}
		return typ + ".events"
	}); dups != 0 {
		t.Fatalf("%d repeats without any fault", dups)
	}
}

// TestE2ERestartDuringDrain stops and starts a private broker node while
// a relay drains a large backlog into a durable queue: nothing is lost,
// order holds once repeats are dropped, and the drain completes with exit 0.
func TestE2ERestartDuringDrain(t *testing.T) {
	t.Parallel()
	node := startRabbitNode(t)
	u := node.URL
	const n = 5000
	ex := "outbox.e2e." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	b := e2etest.NewBacklog(t, "e2e_amqp", n, e2etest.Aggregates(80, 20))
	r := newQueueReader(t, u, ex, "#", true)
	_, ch := dialT(t, u)

	// The rate limit stretches the drain over about 20 s, so that most of
	// the backlog is still to send when the relay is frozen for the
	// restart, on a fast machine too. The publish timeout is the default
	// (10s): a confirm that comes later is an ambiguous outcome, sent
	// again, and on a busy machine a shorter one makes so many repeats
	// after the node comes back that they exceed the restart's bound.
	relay := e2etest.StartCLI(t, b.RelayArgs(fmt.Sprintf("%s?exchange=%s&reconnect_wait=100ms&rate=%d/s&burst=100", u, ex, n/20),
		"--batch", "100", "--backoff-min", "10ms", "--backoff-max", "500ms", "--max-retries", "1000")...)

	// Wait until a tenth of the backlog is queued, then restart. The
	// deadline only bounds a hang, with room for a drain that a busy
	// machine slows to several minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	relay.Await(ctx, t, 20*time.Millisecond, fmt.Sprintf("%d events queued", n/10), func() bool {
		q, err := ch.QueueDeclarePassive(r.queue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages >= n/10
	})
	if relay.Exited() {
		t.Fatalf("the relay exited (%v) before the restart:\n%s", relay.Err(), relay.Log())
	}
	// The relay is frozen while rabbitmqctl stops the application: on a
	// loaded machine rabbitmqctl can take longer than the rest of the
	// drain, which would then finish before the broker went away. Thawed,
	// the relay finds its connection closed and the broker down until
	// start_app is done.
	relay.Freeze(t)
	node.rabbitmqctl(t, "stop_app")
	relay.Thaw(t)
	node.rabbitmqctl(t, "start_app")
	if err := node.awaitAMQP(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.connect(); err != nil {
		t.Fatal(err)
	}
	relay.Wait(ctx, t)
	if log := relay.Log(); !strings.Contains(log, "connection to the broker lost") {
		t.Errorf("the relay never saw the broker go away; its log:\n%s", log)
	}
	if got := b.Processed(t); got != n {
		t.Fatalf("%d of %d events PROCESSED", got, n)
	}
	ds, err := r.deliveries(ctx, n)
	if err != nil {
		t.Fatalf("read %d of %d: %v", len(ds), n, err)
	}
	dups := e2etest.CheckArrived(t, arrived(t, ds), b, func(typ string) string { return typ + ".events" })
	t.Logf("%d events, %d repeats after the restart (bound: the events in flight)", n, dups)
	if dups > 100 {
		t.Fatalf("%d repeats: more than one batch (--batch 100), the most that can be in flight at the restart; the relay's log:\n%s", dups, relay.Log())
	}
}

// TestE2EBrokerUpAfterRelayStarts starts the relay while nothing listens
// on the broker's port (a proxy to the shared broker, still closed): it
// waits, says so at WARN, and delivers the whole backlog once the proxy
// opens.
func TestE2EBrokerUpAfterRelayStarts(t *testing.T) {
	u := brokerURL(t)
	pu, _ := url.Parse(u)
	proxy := sinktest.NewProxy(t, pu.Host)
	pu.Host = proxy.Addr
	ex := "outbox.e2e." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	b := e2etest.NewBacklog(t, "e2e_amqp", 500, e2etest.Aggregates(8, 4))
	r := newQueueReader(t, u, ex, "#", true)
	relay := e2etest.StartCLI(t, b.RelayArgs(pu.String()+"?exchange="+ex+"&reconnect_wait=50ms")...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	relay.Await(ctx, t, 20*time.Millisecond, "a WARN that the broker is unreachable", func() bool {
		return strings.Contains(relay.Log(), "level=WARN") && strings.Contains(relay.Log(), "unreachable")
	})
	if err := proxy.Open(); err != nil {
		t.Fatal(err)
	}
	relay.Wait(ctx, t)
	if got := b.Processed(t); got != len(b.Events) {
		t.Fatalf("%d of %d events PROCESSED", got, len(b.Events))
	}
	ds, err := r.deliveries(ctx, len(b.Events))
	if err != nil {
		t.Fatal(err)
	}
	if dups := e2etest.CheckArrived(t, arrived(t, ds), b, func(typ string) string { return typ + ".events" }); dups != 0 {
		t.Fatalf("%d repeats", dups)
	}
}
