package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox/admin"
)

// BenchmarkBulkRetry retries OUTBOX_BULK_BENCH_ROWS FAILED events (default
// 100,000, loaded with generate_series) through the real HTTP handler,
// with a client whose timeout (30s) is shorter than the action, following
// the job until it is done. Every 100 ms a goroutine samples the age of
// the oldest open transaction on the store's connections
// (pg_stat_activity.xact_start). It reports the total time, events/s, the
// time to the first answer and the longest transaction seen, and checks
// that every event ended requeued with one audit row. One iteration takes
// minutes:
//
//	go test -run '^$' -bench BenchmarkBulkRetry -benchtime 1x -timeout 30m ./admin/
func BenchmarkBulkRetry(b *testing.B) {
	n := 100_000
	if s := os.Getenv("OUTBOX_BULK_BENCH_ROWS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1000 {
			b.Fatalf("OUTBOX_BULK_BENCH_ROWS=%q: want a number of at least 1000", s)
		}
		n = v
	}
	var total, first, longest time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		o := newBulkOutbox(b, n)
		h, err := admin.New(admin.Config{Store: o.store, Tokens: testTokens, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(h)
		b.StartTimer()

		stop := make(chan struct{})
		var wg sync.WaitGroup
		var maxXact time.Duration
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				var secs float64
				err := o.pool.QueryRow(context.Background(), `SELECT COALESCE(EXTRACT(EPOCH FROM max(clock_timestamp() - xact_start)), 0)::float8
                    FROM pg_stat_activity WHERE application_name = $1 AND xact_start IS NOT NULL`, o.app).Scan(&secs)
				if err != nil {
					b.Errorf("sample pg_stat_activity: %v", err)
					return
				}
				maxXact = max(maxXact, time.Duration(secs*float64(time.Second)))
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}()

		c := &http.Client{Timeout: 30 * time.Second}
		call := func(method, path string, into any) int {
			req, _ := http.NewRequest(method, srv.URL+path, nil)
			req.Header.Set("Authorization", "Bearer "+operatorToken)
			resp, err := c.Do(req)
			if err != nil {
				b.Fatalf("%s %s: %v", method, path, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(body, into); err != nil {
				b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, body)
			}
			return resp.StatusCode
		}
		t0 := time.Now()
		var j jobAnswer
		status := call("POST", "/api/v1/events/retry?status=FAILED&reason=bench", &j)
		first = time.Since(t0)
		if status != http.StatusAccepted {
			b.Fatalf("POST: status %d, want 202 (an action on %d events outlasts the wait): %+v", status, n, j)
		}
		poll := time.NewTicker(500 * time.Millisecond)
		deadline := time.Now().Add(25 * time.Minute)
		for j.State == "running" {
			if time.Now().After(deadline) {
				b.Fatalf("the job is still running after 25m: %+v", j)
			}
			<-poll.C
			if s := call("GET", j.URL, &j); s != 200 {
				b.Fatalf("GET %s: %d", j.URL, s)
			}
		}
		poll.Stop()
		total = time.Since(t0)
		close(stop)
		wg.Wait()
		longest = maxXact

		b.StopTimer()
		if j.State != "done" || j.Result.Applied != int64(n) {
			b.Fatalf("job: %+v", j)
		}
		o.checkAllRequeued(b, n)
		srv.Close()
		if err := h.Close(); err != nil {
			b.Error(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(total.Seconds(), "total-s")
	b.ReportMetric(float64(n)/total.Seconds(), "events/s")
	b.ReportMetric(float64(first.Milliseconds()), "first-answer-ms")
	b.ReportMetric(float64(longest.Microseconds())/1000, "longest-xact-ms")
	b.ReportMetric(0, "ns/op")
}
