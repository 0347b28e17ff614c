package natssink_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/natssink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// BenchmarkPublish publishes batches of 500 events to the shared server:
// over 100 aggregates (5 PubAck rounds a batch), and over 500 (1 round).
func BenchmarkPublish(b *testing.B) {
	url := testenvNATS(b)
	for _, aggs := range []int{100, 500} {
		b.Run(fmt.Sprintf("batch500_aggs%d", aggs), func(b *testing.B) {
			id := uniq()
			b.Cleanup(func() { deleteStream(b, url, "B"+id) })
			s, err := natssink.New(context.Background(), natssink.Config{URL: url, Route: "b" + id + ".{aggregate_type}",
				Stream: "B" + id, StreamSubjects: []string{"b" + id + ".payment"}, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close(context.Background()) })
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
