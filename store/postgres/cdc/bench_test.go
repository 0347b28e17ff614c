package cdc_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink/discard"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/postgres/cdc"
)

// BenchmarkSource compares --source poll and --source logical in one run,
// on one server: the drain of a committed backlog (benchDrain events in
// transactions of 100) and the latency of a trickle (benchTrickle events,
// one per transaction, every 2ms), from created_at to processed_at on the
// database clock. Run it with -benchtime=1x.
//
//	go test -run '^$' -bench BenchmarkSource -benchtime=1x ./store/postgres/cdc/
func BenchmarkSource(b *testing.B) {
	for _, mode := range []string{"poll", "logical"} {
		b.Run(mode, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				rate, p50, p99 := benchOnce(b, mode)
				b.ReportMetric(rate, "drain-events/s")
				b.ReportMetric(p50, "p50-latency-ms")
				b.ReportMetric(p99, "p99-latency-ms")
			}
		})
	}
}

const (
	benchDrain   = 20000
	benchTrickle = 500
)

func benchOnce(b *testing.B, mode string) (rate, p50, p99 float64) {
	h := newHarnessOn(b, testenv.LogicalPostgres(b))
	ctx := context.Background()
	var st store.Store = h.store
	if mode == "poll" { // poll mode with its wake-ups, as deployed
		ps, err := postgres.New(h.pool, postgres.Config{Table: h.table})
		if err != nil {
			b.Fatal(err)
		}
		st = ps
		h.store = ps
	} else {
		st = h.source(b, cdc.Config{PollInterval: 5 * time.Second, StatusInterval: 100 * time.Millisecond})
	}
	// The backlog, committed before the relay starts (the slot exists).
	for i := 0; i < benchDrain/100; i++ {
		h.enqueue(b, fmt.Sprintf("agg-%d", i%50), 100)
	}
	r, err := relay.New(relay.Config{Store: st, Sink: discard.New(), Logger: quietLogger(), PollInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { done <- r.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	if src, ok := st.(*cdc.Source); ok {
		eventually(b, 5*time.Minute, "the backlog streamed", func() bool { return src.Streamed() >= benchDrain })
		b.Logf("streamed after %s", time.Since(start))
	}
	eventually(b, 5*time.Minute, "the backlog drained", func() bool { return h.count(b, outbox.StatusProcessed) == benchDrain })
	rate = benchDrain / time.Since(start).Seconds()
	b.StopTimer()
	if src, ok := st.(*cdc.Source); ok {
		b.Logf("drain: %d claims; %d events claimed from the stream, %d by the poll", r.Stats().Claims, src.ClaimedByStream(), src.ClaimedByPoll())
	}

	tick := time.NewTicker(2 * time.Millisecond)
	for i := 0; i < benchTrickle; i++ {
		<-tick.C
		h.enqueue(b, fmt.Sprintf("t-%d", i%20), 1)
	}
	tick.Stop()
	eventually(b, time.Minute, "the trickle delivered", func() bool { return h.count(b, outbox.StatusProcessed) == benchDrain+benchTrickle })
	rows, err := h.pool.Query(ctx, fmt.Sprintf(`SELECT EXTRACT(EPOCH FROM processed_at - created_at)::float8 * 1000 FROM %q WHERE aggregate_id LIKE 't-%%'`, h.table))
	if err != nil {
		b.Fatal(err)
	}
	var lat []float64
	for rows.Next() {
		var ms float64
		if err := rows.Scan(&ms); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, ms)
	}
	rows.Close()
	sort.Float64s(lat)
	return rate, lat[len(lat)/2], lat[len(lat)*99/100]
}
