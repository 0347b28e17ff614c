package sinkkit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"

	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/sink/sinkkit"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// A real HTTP sink behind the limits: the endpoint never sees more than
// max_in_flight requests at once, and by any time t after the start it
// has received at most burst + rate*t (a bound the limiter cannot exceed,
// so the check cannot fail by chance); every message is delivered, none
// reported failed: over the limit is backpressure, never an error.
func TestLimitedHTTPSink(t *testing.T) {
	t.Parallel()
	const rate, burst, maxInFlight = 200.0, 10, 4
	n := 120
	if testing.Short() {
		n = 60
	}
	var inflight, peak atomic.Int64
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		cur := inflight.Add(1)
		defer inflight.Add(-1)
		for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
		}
		mu.Lock()
		arrivals = append(arrivals, now)
		mu.Unlock()
		t := time.NewTimer(2 * time.Millisecond) // a receiver that takes a moment
		<-t.C
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	hs, err := httpsink.New(httpsink.Config{URL: srv.URL + "/approve", Concurrency: 64})
	if err != nil {
		t.Fatal(err)
	}
	cfg := sinkkit.LimitConfig{Default: sinkkit.Limits{Rate: rate, Burst: burst, MaxInFlight: maxInFlight}}
	start := time.Now()
	l, err := sinkkit.Limit(hs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	// Two concurrent Publish calls share the route's bucket and slots.
	var wg sync.WaitGroup
	results := make([][]error, 2)
	for c := range 2 {
		var msgs []outbox.Message
		for i := range n / 2 {
			msgs = append(msgs, sinktest.Message(fmt.Sprintf("c%d-k%d", c, i%10), i/10))
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			results[c] = l.Publish(ctx, msgs)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for c, res := range results {
		for i, err := range res {
			if err != nil {
				t.Fatalf("call %d, message %d: %v (the limit must be backpressure, not an error)", c, i, err)
			}
		}
	}
	if p := peak.Load(); p > maxInFlight {
		t.Fatalf("%d requests in flight at once, over max_in_flight=%d", p, maxInFlight)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != n {
		t.Fatalf("%d requests arrived, want %d", len(arrivals), n)
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	for k, at := range arrivals {
		if bound := float64(burst) + rate*at.Sub(start).Seconds(); float64(k+1) > bound+1e-9 {
			t.Fatalf("request %d arrived %s after the start, over burst + rate*t = %.1f", k+1, at.Sub(start), bound)
		}
	}
	t.Logf("%d requests in %s (limit %v/s, burst %d): %.0f/s, at most %d in flight",
		n, elapsed.Round(time.Millisecond), rate, burst, float64(n)/elapsed.Seconds(), peak.Load())
}
