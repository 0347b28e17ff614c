package kafkasink_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/kafkasink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// A sink made while no broker listens: New succeeds, publishes fail
// retryably, Reachable says why; once a broker starts on that port, the
// sink reaches it on its own and delivers.
func TestBrokerDownAtStart(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t)
	topic := prefix + ".payment.events"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	addr := c.addr()
	c.kfake.Close()
	c.kfake = nil
	s := newSink(t, kafkasink.Config{Brokers: []string{addr}, Route: prefix + ".{aggregate_type}.events", ProduceTimeout: 3 * time.Second})
	if ok, _, _ := s.Reachable(); ok {
		t.Fatal("Reachable() is true with no broker")
	}
	res := s.Publish(publishCtx(t), []outbox.Message{sinktest.Message("a", 0)})
	if res[0] == nil || outbox.IsPermanent(res[0]) {
		t.Fatalf("publish with no broker: %v, want retryable", res[0])
	}
	sinktest.Eventually(t, 10*time.Second, "Reachable to report the connection error", func() bool {
		ok, err, _ := s.Reachable()
		return !ok && err != nil && strings.Contains(err.Error(), addr)
	})
	if err := c.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sinktest.Eventually(t, 30*time.Second, "the sink to reach the broker", func() bool { ok, _, _ := s.Reachable(); return ok })
	// The first publish after the broker's return may still time out on
	// a loaded machine (the client refreshes its metadata first): as a
	// relay would, publish again until one is acknowledged. A publish that
	// timed out may still have been written, with the same event id.
	m := sinktest.Message("a", 1)
	var last error
	sinktest.Eventually(t, 2*time.Minute, "a publish once the broker is up to be acknowledged", func() bool {
		err := s.Publish(publishCtx(t), []outbox.Message{m})[0]
		if err != nil && (outbox.IsPermanent(err) || last == nil || err.Error() != last.Error()) {
			t.Logf("publish once the broker is up: %v", err)
		}
		if outbox.IsPermanent(err) {
			t.Fatalf("publish once the broker is up failed for good: %v", err)
		}
		last = err
		return err == nil
	})
	got, err := newReader(t, addr, topic).read(publishCtx(t), 1)
	if err != nil || len(got) == 0 {
		t.Fatalf("read %v, %v", got, err)
	}
	// Each record read is that event: once, or more than once when a
	// publish that timed out had been written (at least once).
	for _, g := range got {
		if g.EventID != m.EventID.String() {
			t.Fatalf("read event %s, want only %s (the publish with no broker must not have been written): %v", g.EventID, m.EventID, got)
		}
	}
}

// Event data cannot create a topic: with automatic topic creation on at
// the broker and in the sink, aggregate types that make illegal topic
// names fail for good, naming the field, and no topic appears.
func TestRoutingCannotCreateTopics(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.AllowAutoTopicCreation())
	s := newSink(t, kafkasink.Config{Brokers: []string{c.addr()}, AllowAutoTopicCreation: true})
	if got := s.Destination(&outbox.Message{AggregateType: "payment"}); got != "payment.events" {
		t.Fatalf("Destination = %q, want payment.events", got)
	}
	for _, bad := range []string{"merchant.>", "*", "$SYS.x", "a b", "x/y", strings.Repeat("p", 250), "ü"} {
		msgs := []outbox.Message{sinktest.Message("a", 0), sinktest.Message("a", 1)}
		msgs[0].AggregateType, msgs[1].AggregateType = bad, bad
		res := s.Publish(publishCtx(t), msgs)
		var de *sink.DestinationError
		if !outbox.IsPermanent(res[0]) || !errors.As(res[0], &de) || de.Kind != "topic" || !strings.Contains(res[0].Error(), "aggregate_type") {
			t.Errorf("aggregate type %.20q: %v, want a permanent topic DestinationError", bad, res[0])
		}
		if !errors.Is(res[1], outbox.ErrNotAttempted) {
			t.Errorf("aggregate type %.20q, second event: %v, want not attempted", bad, res[1])
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(publishCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if names := topics.Names(); len(names) != 0 {
		t.Fatalf("topics were created: %v", names)
	}
}
