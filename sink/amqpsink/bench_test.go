package amqpsink_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/amqpsink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// BenchmarkPublish publishes batches of 500 events to a durable queue:
// over 100 aggregates (5 confirm rounds a batch), and over 500 (1 round).
func BenchmarkPublish(b *testing.B) {
	u := brokerURL(b)
	for _, aggs := range []int{100, 500} {
		b.Run(fmt.Sprintf("batch500_aggs%d", aggs), func(b *testing.B) {
			ex := "outbox.bench." + uniq()
			b.Cleanup(func() { deleteExchange(u, ex) })
			s, err := amqpsink.New(context.Background(), amqpsink.Config{URL: u, Exchange: ex, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close(context.Background()) })
			newQueueReader(b, u, ex, "#", true)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				msgs := make([]outbox.Message, 500)
				for j := range msgs {
					msgs[j] = sinktest.Message(fmt.Sprint(j%aggs), i)
				}
				for _, err := range s.Publish(context.Background(), msgs) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*500)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
