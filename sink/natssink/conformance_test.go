package natssink_test

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/natssink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

var features = sinktest.Features{OrderedPerKey: true, BrokerDedup: true, Receipts: "jetstream"}

// harness gives a sink on url whose subjects (t<id>.<aggregate_type>.events)
// and stream (T<id>, created by the sink) belong to this test only.
func harness(t *testing.T, url string, restart func(context.Context) error) *sinktest.Harness {
	id := uniq()
	stream := "T" + id
	cfg := natssink.Config{
		URL:            url,
		Route:          "t" + id + ".{aggregate_type}.events",
		Stream:         stream,
		StreamSubjects: []string{"t" + id + ".*.events"}, // three tokens: no overlap with a stream left on *.events
		PublishTimeout: 5 * time.Second,
		ReconnectWait:  50 * time.Millisecond,
		Logger:         quiet,
	}
	s, err := natssink.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteStream(t, url, stream) })
	r := newReader(t, url, stream)
	return &sinktest.Harness{
		Sink: s,
		Read: r.Read,
		// The server announces max_payload (1 MiB by default); nats.go
		// refuses a larger message before sending it, as the server would.
		Poison: func(m outbox.Message) outbox.Message {
			m.Payload = bigPayload(2 << 20)
			return m
		},
		Restart:               restart,
		InvalidAggregateTypes: []string{"merchant.>", "*", "$SYS.x", "a b"},
		Unreachable: func(t *testing.T) sink.Sink {
			down := cfg
			down.URL = "nats://" + sinktest.ClosedAddr(t)
			s, err := natssink.New(context.Background(), down)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// TestConformance runs the suite against the shared NATS server
// (OUTBOX_TEST_NATS). That server is not restarted: the restart test runs
// in TestConformancePrivate.
func TestConformance(t *testing.T) {
	url := sharedURL(t)
	sinktest.Run(t, features, func(t *testing.T) *sinktest.Harness {
		return harness(t, url, nil)
	})
}

// TestConformancePrivate runs the suite against a private JetStream
// server (a nats-server process) per test, which the restart test stops and starts.
func TestConformancePrivate(t *testing.T) {
	sinktest.Run(t, features, func(t *testing.T) *sinktest.Harness {
		e := startPrivate(t)
		return harness(t, e.URL, e.restart)
	})
}
