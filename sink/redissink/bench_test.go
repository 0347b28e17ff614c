package redissink_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/redissink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// BenchmarkPublish500 measures Publish alone: batches of 500 messages over
// 100 aggregates, one pipeline each, to the shared Redis (the streams are
// capped with MAXLEN ~ 100000 and deleted afterwards).
func BenchmarkPublish500(b *testing.B) {
	addr, db := sharedRedis(b)
	prefix := uniquePrefix(b)
	c := newClient(b, addr, db)
	dropPrefix(b, c, prefix)
	s, err := redissink.New(context.Background(), redissink.Config{Addr: addr, DB: db, Route: prefix + ".{aggregate_type}.events", MaxLen: 100000})
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
