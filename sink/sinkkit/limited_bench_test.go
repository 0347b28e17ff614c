package sinkkit_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/discard"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// BenchmarkLimited measures what the limits cost per batch of 500
// messages over 50 aggregates: the discard sink alone, behind limits
// that never hold it back (a route without limits; a high rate), and
// behind an in-flight cap.
func BenchmarkLimited(b *testing.B) {
	msgs := make([]outbox.Message, 500)
	for i := range msgs {
		msgs[i] = outbox.Message{EventID: outbox.NewEventID(), AggregateType: "payment", AggregateID: fmt.Sprint("tx-", i%50), EventType: "E", Payload: []byte(`{}`)}
	}
	for _, tc := range []struct {
		name string
		cfg  *sinkkit.LimitConfig
	}{
		{"bare", nil},
		{"unlimited-route", &sinkkit.LimitConfig{Routes: map[string]sinkkit.Limits{"other": {Rate: 1}}}},
		{"rate-1e9", &sinkkit.LimitConfig{Default: sinkkit.Limits{Rate: 1e9, Burst: 1e6}}},
		{"in-flight-1000", &sinkkit.LimitConfig{Default: sinkkit.Limits{MaxInFlight: 1000}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var s sink.Sink = discard.New()
			if tc.cfg != nil {
				l, err := sinkkit.Limit(s, *tc.cfg)
				if err != nil {
					b.Fatal(err)
				}
				s = l
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				s.Publish(ctx, msgs)
			}
			b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
