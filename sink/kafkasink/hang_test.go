package kafkasink_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/kafkasink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// TestPublishToHangingBroker: a broker that takes produce requests and
// never answers makes Publish give up at ProduceTimeout with a
// destination fault, which the relay's breaker counts.
func TestPublishToHangingBroker(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t)
	c := newCluster(t, kfake.SeedTopics(1, prefix+".payment.events"))
	s := newSink(t, kafkasink.Config{Brokers: []string{c.addr()}, Route: prefix + ".{aggregate_type}.events", ProduceTimeout: 2 * time.Second})
	if err := s.Publish(publishCtx(t), []outbox.Message{sinktest.Message("warm", 0)})[0]; err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	holdFirstProduce(c, release)
	sinktest.PublishToHang(t, s, []outbox.Message{sinktest.Message("a", 1), sinktest.Message("b", 1), sinktest.Message("a", 2)}, 2*time.Minute)
}
