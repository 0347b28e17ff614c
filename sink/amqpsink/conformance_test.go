package amqpsink_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/amqpsink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// conformanceHarness gives a sink on the broker at u publishing to an
// exchange of this test only (outbox.sinktest.<id>), deleted at cleanup,
// read from a queue of its own bound to every routing key.
//
// Poison is an event over the sink's MaxMessageSize (64 KiB here), which
// the sink refuses before sending. The broker's own refusal of an
// oversized message closes the whole channel, failing the unconfirmed
// messages of every other aggregate on it, so it cannot pass the suite's
// partial-failure test; TestBrokerRefusesOversized covers it.
func conformanceHarness(t *testing.T, u string, restart func(ctx context.Context) error) *sinktest.Harness {
	exchange := "outbox.sinktest." + uniq()
	t.Cleanup(func() { deleteExchange(u, exchange) })
	cfg := amqpsink.Config{
		URL:            u,
		Exchange:       exchange,
		PublishTimeout: 5 * time.Second,
		ReconnectWait:  100 * time.Millisecond,
		MaxMessageSize: 64 << 10,
		Logger:         quiet,
	}
	s, err := amqpsink.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := newQueueReader(t, u, exchange, "#", false)
	h := &sinktest.Harness{
		Sink: s,
		Read: r.Read,
		Poison: func(m outbox.Message) outbox.Message {
			m.Payload = bigPayload(128 << 10)
			return m
		},
		Timeout:               60 * time.Second,
		RouteOf:               func(r sinktest.Received) string { return exchange + "/" + r.Destination },
		InvalidAggregateTypes: []string{strings.Repeat("x", 300), "bad\xffutf8"},
		Unreachable: func(t *testing.T) sink.Sink {
			down := cfg
			down.URL = "amqp://guest:guest@" + sinktest.ClosedAddr(t) + "/"
			s, err := amqpsink.New(context.Background(), down)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	if restart != nil {
		h.Restart = func(ctx context.Context) error {
			if err := restart(ctx); err != nil {
				return err
			}
			// The reader's exclusive queue went with its connection.
			return r.connect()
		}
	}
	return h
}

// TestConformance runs the suite against the shared broker
// (OUTBOX_TEST_AMQP), which it never restarts: the restart test runs in
// TestConformanceRestart.
func TestConformance(t *testing.T) {
	t.Parallel()
	u := brokerURL(t)
	sinktest.Run(t, sinktest.Features{OrderedPerKey: true, Receipts: "amqp"}, func(t *testing.T) *sinktest.Harness {
		return conformanceHarness(t, u, nil)
	})
}

// TestConformanceRestart runs the suite's restart test on a private node,
// which it stops and starts.
func TestConformanceRestart(t *testing.T) {
	t.Parallel()
	sinktest.RunRestart(t, func(t *testing.T) *sinktest.Harness {
		node := startRabbitNode(t)
		return conformanceHarness(t, node.URL, func(ctx context.Context) error { return node.restart(ctx, t) })
	})
}
