package kafkasink_test

// End-to-end: the real `outbox` binary drains a PostgreSQL outbox into an
// in-process Kafka (kfake), and a consumer written here reads it back.

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/sink/sinktest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	sinktest.RemoveCLI()
	os.Exit(code)
}

// TestEndToEnd: `outbox relay --drain` delivers 2000 events of payment and
// merchant aggregates; payment events go to payment.events (the default
// route) and merchant events to merchant.audit (--route).
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	n := 2000
	if testenv.Short() {
		n = 300
	}
	b := sinktest.NewBacklog(t, "kafka_e2e", n, sinktest.DefaultAggregates())
	topics := []string{"payment.events", "merchant.events", "merchant.audit"}
	c := newCluster(t, kfake.SeedTopics(3, topics...))

	sinktest.RunCLI(t, "", b.RelayArgs("kafka://"+c.addr(), "--route", "merchant=merchant.audit")...)

	r := newReader(t, c.addr(), topics...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := r.read(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	dups := sinktest.CheckArrived(t, got, b, func(typ string) string {
		if typ == "merchant" {
			return "merchant.audit"
		}
		return typ + ".events"
	})
	if dups != 0 {
		t.Fatalf("%d duplicates with no fault", dups)
	}
	if got := b.Processed(t); got != n {
		t.Fatalf("%d of %d events PROCESSED after the drain", got, n)
	}
}

// TestEndToEndBrokerRestart restarts the broker while a relay process is
// draining a backlog, with a produce request held in flight at the moment
// of the restart: nothing is lost, order per aggregate holds, and the drain
// completes.
func TestEndToEndBrokerRestart(t *testing.T) {
	t.Parallel()
	n, heldAt := 6000, int64(30)
	if testenv.Short() {
		// A batch of 100 is about one produce request: hold an early one.
		n, heldAt = 1000, 10
	}
	b := sinktest.NewBacklog(t, "kafka_e2e", n, sinktest.DefaultAggregates())
	topics := []string{"payment.events", "merchant.events"}
	c := newCluster(t, kfake.SeedTopics(3, topics...))

	// Let some produce requests through, then hold the next one until the
	// broker is stopped: the relay is then mid-drain, with records in
	// flight whose outcome it cannot know.
	var produced atomic.Int64
	held := make(chan struct{})
	stop := make(chan struct{})
	k := c.kfake // c.kfake changes on restart
	k.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		if produced.Add(1) == heldAt {
			close(held)
			k.SleepControl(func() { <-stop })
		}
		return nil, nil, false
	})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	relay := sinktest.StartCLI(t, b.RelayArgs("kafka://"+c.addr()+"?produce_timeout=2s", "--batch", "100",
		"--max-retries", "1000", "--backoff-min", "10ms", "--backoff-max", "200ms", "--poll-interval", "50ms")...)
	relay.Await(ctx, t, 5*time.Millisecond, fmt.Sprintf("%d produce requests", heldAt), func() bool {
		select {
		case <-held:
			return true
		default:
			return false
		}
	})
	close(stop)
	if err := c.restart(ctx); err != nil {
		t.Fatal(err)
	}
	relay.Wait(ctx, t)

	r := newReader(t, c.addr(), topics...)
	got, err := r.read(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	dups := sinktest.CheckArrived(t, got, b, func(typ string) string { return typ + ".events" })
	if dups > 2*100 {
		t.Fatalf("%d duplicates after one broker restart with batches of 100: more than the work in flight", dups)
	}
	if got := b.Processed(t); got != n {
		t.Fatalf("%d of %d events PROCESSED after the drain", got, n)
	}
	t.Logf("broker restarted mid-drain: %d events, 0 lost, %d duplicates", n, dups)
}
