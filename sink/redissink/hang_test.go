package redissink_test

import (
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/redissink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// TestPublishToHangingServer: a Redis that stops answering mid-connection
// makes Publish give up at the sink's Timeout with a destination fault,
// which the relay's breaker counts.
func TestPublishToHangingServer(t *testing.T) {
	t.Parallel()
	addr, db := sharedRedis(t)
	prefix := uniquePrefix(t)
	dropPrefix(t, newClient(t, addr, db), prefix)
	px := sinktest.StartStallProxy(t, addr)
	s := newSink(t, redissink.Config{Addr: px.Addr(), DB: db, Route: prefix + ".{aggregate_type}", Timeout: time.Second})
	if err := s.Publish(testCtx(t), []outbox.Message{sinktest.Message("warm", 0)})[0]; err != nil {
		t.Fatal(err)
	}
	px.Stall()
	sinktest.PublishToHang(t, s, []outbox.Message{sinktest.Message("a", 1), sinktest.Message("b", 1), sinktest.Message("a", 2)}, 2*time.Minute)
}
