package binlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/mysql/binlog"
)

// BenchmarkCommitToSink measures, on one private MariaDB with the binary
// log on, the latency from a producer's COMMIT to the sink's Publish of
// its event, at 200 and 1,000 events/s (32 producers on connections of
// their own; one event per transaction), for
// the relay polling the table (its default 1s interval, as deployed) and
// reading the binary log. Run it with -benchtime=1x:
//
//	go test -run '^$' -bench BenchmarkCommitToSink -benchtime=1x ./store/mysql/binlog/
func BenchmarkCommitToSink(b *testing.B) {
	srv := testenv.StartMariaDB(b, binlogServerArgs...)
	for _, rate := range []int{200, 1000} {
		for _, mode := range []string{"poll", "binlog"} {
			b.Run(fmt.Sprintf("%s/%d-per-s", mode, rate), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					p50, p99, achieved := commitToSink(b, srv, mode, rate, fmt.Sprintf("bench_%s_%d_%d", mode, rate, i))
					b.ReportMetric(achieved, "committed/s")
					b.ReportMetric(p50, "p50-ms")
					b.ReportMetric(p99, "p99-ms")
				}
			})
		}
	}
}

// timingSink records when each event reached it, by the payload's index.
type timingSink struct {
	mu   sync.Mutex
	seen map[int]time.Time
}

func (s *timingSink) Publish(_ context.Context, msgs []outbox.Message) []error {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		var p struct{ I int }
		if json.Unmarshal(m.Payload, &p) == nil {
			if _, dup := s.seen[p.I]; !dup {
				s.seen[p.I] = now
			}
		}
	}
	return make([]error, len(msgs))
}

func (s *timingSink) Close(context.Context) error { return nil }

func (s *timingSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func commitToSink(b *testing.B, srv *testenv.MariaDBServer, mode string, rate int, table string) (p50, p99, achieved float64) {
	ctx := context.Background()
	st, err := mysql.Open(ctx, srv.DSN(), mysql.Config{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if _, err := st.MigrateUp(ctx); err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var rs store.Store = st
	var src *binlog.Source
	if mode == "binlog" {
		if src, err = binlog.NewSource(ctx, st, binlog.SourceConfig{DSN: srv.DSN(), Logger: quiet}); err != nil {
			b.Fatal(err)
		}
		rs = src
	}
	sk := &timingSink{seen: map[int]time.Time{}}
	r, err := relay.New(relay.Config{Store: rs, Sink: sk, Logger: quiet, PollInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	if src != nil {
		eventually(b, time.Minute, "the source to read the binary log", src.Streaming)
	}
	// The producers are another process's: their store does not wake the
	// relay's (store.EnqueueObserver), so polling waits for its interval.
	prod, err := mysql.Open(ctx, srv.DSN(), mysql.Config{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	// 32 producers, each on its own connection, commit one event per
	// transaction. Transaction j is due at start + j/rate, and a producer
	// that falls behind commits its next one at once.
	const producers = 32
	const perTx = 1
	prod.DB().SetMaxOpenConns(producers)
	prod.DB().SetMaxIdleConns(producers)
	n := 5 * rate // five seconds of traffic
	committed := make([]time.Time, n)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < producers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := w * perTx; first < n; first += producers * perTx {
				if wait := time.Until(start.Add(time.Duration(first) * time.Second / time.Duration(rate))); wait > 0 {
					time.Sleep(wait) // pacing the offered load, not waiting for a condition
				}
				tx, err := prod.DB().BeginTx(ctx, nil)
				if err != nil {
					b.Error(err)
					return
				}
				last := min(first+perTx, n)
				evs := make([]outbox.Event, 0, perTx)
				for i := first; i < last; i++ {
					evs = append(evs, outbox.Event{AggregateType: "bench", AggregateID: fmt.Sprintf("a-%d", i%50), EventType: "Tick",
						Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
				}
				if _, err := prod.Enqueue(ctx, tx, evs...); err != nil {
					tx.Rollback()
					b.Error(err)
					return
				}
				if err := tx.Commit(); err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				for i := first; i < last; i++ {
					committed[i] = now
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		return 0, 0, 0
	}
	elapsed := time.Since(start)
	achieved = float64(n) / elapsed.Seconds()
	b.Logf("%s: offered %d/s, committed %d events in %s (%.0f/s)", mode, rate, n, elapsed.Round(time.Millisecond), achieved)
	eventually(b, 2*time.Minute, "every event at the sink", func() bool { return sk.count() == n })
	b.StopTimer()
	lat := make([]float64, 0, n)
	sk.mu.Lock()
	for i, at := range sk.seen {
		lat = append(lat, float64(at.Sub(committed[i]).Microseconds())/1000)
	}
	sk.mu.Unlock()
	sort.Float64s(lat)
	if src != nil {
		b.Logf("%s at %d/s: %d events claimed from the stream, %d by the poll", mode, rate, src.ClaimedByStream(), src.ClaimedByPoll())
	}
	return lat[len(lat)/2], lat[len(lat)*99/100], achieved
}
