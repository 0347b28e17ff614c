package natssink_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/natssink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// TestPublishToHangingServer: a NATS server that stops answering
// mid-connection makes each message give up at PublishTimeout with a
// destination fault, reported as it happens, which the relay's breaker
// counts.
func TestPublishToHangingServer(t *testing.T) {
	t.Parallel()
	shared := sharedURL(t)
	u, err := url.Parse(shared)
	if err != nil {
		t.Fatal(err)
	}
	id := uniq()
	stream := "H" + id
	t.Cleanup(func() { deleteStream(t, shared, stream) })
	px := sinktest.StartStallProxy(t, u.Host)
	u.Host = px.Addr()
	s := newSink(t, natssink.Config{URL: u.String(), Route: "h" + id + ".{aggregate_type}.events", Stream: stream,
		StreamSubjects: []string{"h" + id + ".*.events"}, PublishTimeout: time.Second})
	mustPublish(t, s, sinktest.Message("warm", 0))
	px.Stall()
	msgs := []outbox.Message{sinktest.Message("a", 1), sinktest.Message("b", 1), sinktest.Message("a", 2)}
	if _, reported := sinktest.PublishToHang(t, s, msgs, 2*time.Minute); reported < 2 {
		t.Errorf("%d results reported before Publish returned, want the 2 messages sent", reported)
	}
}
