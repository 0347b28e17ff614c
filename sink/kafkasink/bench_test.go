package kafkasink_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/kafkasink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// BenchmarkPublish500 measures Publish alone: batches of 500 messages over
// 100 aggregates to an in-process kfake broker (10 partitions). kfake runs
// on the same cores, so this bounds the sink's own cost, not Kafka's.
func BenchmarkPublish500(b *testing.B) {
	prefix := uniquePrefix(b)
	c := newCluster(b, kfake.SeedTopics(10, prefix+".payment.events"))
	s, err := kafkasink.New(context.Background(), kafkasink.Config{Brokers: []string{c.addr()}, Route: prefix + ".{aggregate_type}.events"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	msgs := make([]outbox.Message, 500)
	for i := range msgs {
		msgs[i] = sinktest.Message(fmt.Sprintf("tx-%d", i%100), i/100)
	}
	b.ResetTimer()
	for b.Loop() {
		for i, err := range s.Publish(context.Background(), msgs) {
			if err != nil {
				b.Fatalf("message %d: %v", i, err)
			}
		}
	}
	b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
}
