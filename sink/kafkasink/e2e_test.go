package kafkasink_test

// End-to-end: the real `outbox` binary drains a PostgreSQL outbox into an
// in-process Kafka (kfake), and a consumer written here reads it back.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/internal/testenv"
)

// TestMain fails the package's tests if a goroutine they started is
// still running once they all passed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
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
	b := e2etest.NewBacklog(t, "kafka_e2e", n, e2etest.DefaultAggregates())
	topics := []string{"payment.events", "merchant.events", "merchant.audit"}
	c := newCluster(t, kfake.SeedTopics(3, topics...))

	e2etest.RunCLI(t, "", b.RelayArgs("kafka://"+c.addr(), "--route", "merchant=merchant.audit")...)

	r := newReader(t, c.addr(), topics...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := r.read(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	dups := e2etest.CheckArrived(t, got, b, func(typ string) string {
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

// TestEndToEndBrokerRestart stops the broker while a relay process is
// draining a backlog, with a produce request held in flight at that
// moment, keeps it down until a publish has failed (the relay recorded a
// RETRY), and starts it again: nothing is lost, order per aggregate holds,
// the drain completes, and events that failed while the broker was down
// were delivered after it came back.
func TestEndToEndBrokerRestart(t *testing.T) {
	t.Parallel()
	n, heldAt := 6000, int64(30)
	if testenv.Short() {
		// A batch of 100 is about one produce request: hold an early one.
		n, heldAt = 1000, 10
	}
	b := e2etest.NewBacklog(t, "kafka_e2e", n, e2etest.DefaultAggregates())
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
	relay := e2etest.StartCLI(t, b.RelayArgs("kafka://"+c.addr()+"?produce_timeout=1s", "--batch", "100",
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
	c.stop()
	// Down until the relay has recorded a publish that failed: produces
	// time out after produce_timeout, and the producer's own retries
	// cannot hide the outage.
	relay.Await(ctx, t, 20*time.Millisecond, "a publish that fails while the broker is down", func() bool {
		outcomes, _ := b.Outcomes(t)
		return outcomes["RETRY"] > 0
	})
	if err := c.start(ctx); err != nil {
		t.Fatal(err)
	}
	relay.Wait(ctx, t)

	if got := b.Processed(t); got != n {
		t.Fatalf("%d of %d events PROCESSED after the drain", got, n)
	}
	outcomes, retriedThenDelivered := b.Outcomes(t)
	if retriedThenDelivered == 0 {
		t.Fatalf("no event both failed while the broker was down and was delivered after (audit outcomes %v): the restart did not matter", outcomes)
	}
	// Reading gets a deadline of its own: with the drain's, a drain slowed
	// down by a busy machine can leave the reader too little time to read
	// records that are all there.
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer rcancel()
	r := newReader(t, c.addr(), topics...)
	got, err := r.read(rctx, n)
	if err != nil {
		t.Fatal(err)
	}
	dups := e2etest.CheckArrived(t, got, b, func(typ string) string { return typ + ".events" })
	// Each duplicate is a copy written by an attempt that the audit trail
	// records as not delivered: its acknowledgement lost (RETRY,
	// RELEASED) or its outcome never recorded (LEASE_EXPIRED). Not a
	// count of batches in flight: on a busy machine the 1 s produce
	// timeout can also run out while the broker is up, each time sending
	// a whole batch again. Plus one batch: when a record is given up
	// after it was sent (its context ended), the producer bumps its epoch
	// and sends again the records of the unanswered request that were not
	// given up; the broker cannot tell them from new ones, so those
	// records can arrive twice under an attempt audited as delivered.
	const heldBatch = 100 // --batch
	if undelivered := outcomes["RETRY"] + outcomes["RELEASED"] + outcomes["LEASE_EXPIRED"]; dups > undelivered+heldBatch {
		t.Fatalf("%d duplicates after one broker restart, more than the %d attempts audited as not delivered and the %d records of the request held at the stop (%v)",
			dups, undelivered, heldBatch, outcomes)
	}
	t.Logf("broker down mid-drain: %d events, 0 lost, %d duplicates; %d events failed to publish while it was down and were delivered after (outcomes %v)",
		n, dups, retriedThenDelivered, outcomes)
}
