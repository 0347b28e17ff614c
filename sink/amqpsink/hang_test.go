package amqpsink_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/amqpsink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// TestPublishToHangingBroker: a RabbitMQ that stops answering
// mid-connection makes each message give up at PublishTimeout with a
// destination fault, reported as it happens, which the relay's breaker
// counts.
func TestPublishToHangingBroker(t *testing.T) {
	t.Parallel()
	shared := brokerURL(t)
	u, err := url.Parse(shared)
	if err != nil {
		t.Fatal(err)
	}
	ex := "outbox.test." + uniq()
	t.Cleanup(func() { deleteExchange(shared, ex) })
	newQueueReader(t, shared, ex, "#", false) // so that messages are routed
	px := sinktest.StartStallProxy(t, u.Host)
	u.Host = px.Addr()
	s := newSink(t, amqpsink.Config{URL: u.String(), Exchange: ex, PublishTimeout: time.Second})
	if err := publish(t, s, sinktest.Message("warm", 0))[0]; err != nil {
		t.Fatal(err)
	}
	px.Stall()
	msgs := []outbox.Message{sinktest.Message("a", 1), sinktest.Message("b", 1), sinktest.Message("a", 2)}
	if _, reported := sinktest.PublishToHang(t, s, msgs, 2*time.Minute); reported < 2 {
		t.Errorf("%d results reported before Publish returned, want the 2 messages sent", reported)
	}
}
