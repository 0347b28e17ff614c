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

// conformanceExchange is shared by the conformance tests; each test
// publishes with routing keys st<id>.<aggregate_type> to a queue of its own.
const conformanceExchange = "outbox.sinktest"

// TestConformance runs the suite against the shared broker. Its restart
// test stops and starts the broker's application.
//
// Poison is an event over the sink's MaxMessageSize (64 KiB here), which
// the sink refuses before sending. The broker's own refusal of an
// oversized message closes the whole channel, failing the unconfirmed
// messages of every other aggregate on it, so it cannot pass the suite's
// partial-failure test; TestBrokerRefusesOversized covers it.
func TestConformance(t *testing.T) {
	u := brokerURL(t)
	t.Cleanup(func() { deleteExchange(u, conformanceExchange) })
	sinktest.Run(t, sinktest.Features{OrderedPerKey: true}, func(t *testing.T) *sinktest.Harness {
		id := uniq()
		cfg := amqpsink.Config{
			URL:            u,
			Exchange:       conformanceExchange,
			Route:          "st" + id + ".{aggregate_type}",
			PublishTimeout: 5 * time.Second,
			ReconnectWait:  100 * time.Millisecond,
			MaxMessageSize: 64 << 10,
			Logger:         quiet,
		}
		s, err := amqpsink.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := newQueueReader(t, u, conformanceExchange, "st"+id+".#", false)
		return &sinktest.Harness{
			Sink: s,
			Read: r.Read,
			Poison: func(m outbox.Message) outbox.Message {
				m.Payload = bigPayload(128 << 10)
				return m
			},
			Restart: func(ctx context.Context) error {
				if err := restartBroker(ctx, t, u); err != nil {
					return err
				}
				// The reader's exclusive queue went with its connection.
				return r.connect()
			},
			Timeout:               60 * time.Second,
			RouteOf:               func(r sinktest.Received) string { return conformanceExchange + "/" + r.Destination },
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
	})
}
