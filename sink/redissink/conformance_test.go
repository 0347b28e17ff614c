package redissink_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/redissink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// harness builds a conformance harness on the server at addr. Streams are
// named prefix.{aggregate_type}.{event_type}, so that the poison message
// (event type Poison) keeps its aggregate but goes to a key that holds a
// string: XADD answers WRONGTYPE.
func harness(t *testing.T, addr string, db int, restart func(context.Context) error) *sinktest.Harness {
	prefix := uniquePrefix(t)
	c := newClient(t, addr, db)
	dropPrefix(t, c, prefix)
	if err := c.Set(context.Background(), prefix+".payment.Poison", "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cfg := redissink.Config{
		Addr:    addr,
		DB:      db,
		Route:   prefix + ".{aggregate_type}.{event_type}",
		Timeout: 5 * time.Second,
		Logger:  quiet,
	}
	s, err := redissink.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &sinktest.Harness{
		Sink: s,
		Read: func(ctx context.Context, n int) ([]sinktest.Received, error) {
			return waitStreams(ctx, c, prefix, n)
		},
		Poison: func(m outbox.Message) outbox.Message {
			m.EventType = "Poison"
			return m
		},
		Restart:               restart,
		InvalidAggregateTypes: []string{"a\x01b", strings.Repeat("k", 1100), "bad\xff"},
		Unreachable: func(t *testing.T) sink.Sink {
			down := cfg
			down.Addr = sinktest.ClosedAddr(t)
			s, err := redissink.New(context.Background(), down)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// TestConformance runs the suite against the shared server
// (OUTBOX_TEST_REDIS), which is never restarted.
func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, sinktest.Features{OrderedPerKey: true, Receipts: "redis"}, func(t *testing.T) *sinktest.Harness {
		addr, db := sharedRedis(t)
		return harness(t, addr, db, nil)
	})
}

// TestConformancePrivateServer runs the suite against a redis-server of
// its own, which the restart test kills and starts again. It keeps nothing
// on disk, like the shared one: after the restart the streams are empty,
// and the suite checks the messages published after it.
func TestConformancePrivateServer(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, sinktest.Features{OrderedPerKey: true, Receipts: "redis"}, func(t *testing.T) *sinktest.Harness {
		srv := startServer(t)
		return harness(t, srv.addr(), 0, srv.restart)
	})
}
