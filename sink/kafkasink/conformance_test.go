package kafkasink_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/kafkasink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// conformanceMaxBytes is the sink's record limit in the conformance
// harness: the poison message is larger.
const conformanceMaxBytes = 16 << 10

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, sinktest.Features{OrderedPerKey: true, Receipts: "kafka"}, func(t *testing.T) *sinktest.Harness {
		prefix := uniquePrefix(t)
		topics := []string{prefix + ".payment.events", prefix + ".merchant.events"}
		c := newCluster(t, kfake.SeedTopics(3, topics...))
		cfg := kafkasink.Config{
			Brokers:         []string{c.addr()},
			Route:           prefix + ".{aggregate_type}.events",
			MaxMessageBytes: conformanceMaxBytes,
			ProduceTimeout:  10 * time.Second,
			Logger:          quiet,
		}
		s, err := kafkasink.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := newReader(t, c.addr(), topics...)
		return &sinktest.Harness{
			Sink: s,
			Read: r.read,
			// Over the sink's MaxMessageBytes: refused before it is sent.
			Poison: func(m outbox.Message) outbox.Message {
				pad, _ := json.Marshal(strings.Repeat("x", 2*conformanceMaxBytes))
				m.Payload = json.RawMessage(`{"pad":` + string(pad) + `}`)
				return m
			},
			Restart:               c.restart,
			InvalidAggregateTypes: []string{"merchant.>", "*", "$SYS.x", "a b"},
			Unreachable: func(t *testing.T) sink.Sink {
				down := cfg
				down.Brokers = []string{sinktest.ClosedAddr(t)}
				down.ProduceTimeout = time.Second
				s, err := kafkasink.New(context.Background(), down)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
		}
	})
}
