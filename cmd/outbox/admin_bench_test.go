package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox/internal/testenv"
)

// BenchmarkRelayAdminCost drains the same backlog with `outbox relay
// --drain` to a discard sink, with --admin off and on (gauges refreshed
// every second, /metrics scraped every second), alternating the two in
// each iteration so that the machine's noise falls on both:
//
//	go test -run '^$' -bench RelayAdminCost -benchtime 5x ./cmd/outbox/
//
// It reports the median drain rate of each (the relay's own figure, from
// its first claim to the drain's end) and the relay process's CPU time per
// event, which a busy machine disturbs far less than the rate.
// OUTBOX_BENCH_EVENTS sets the backlog (default 20000),
// OUTBOX_BENCH_ADMIN_INTERVAL the gauge and scrape interval (default 1s,
// 15 times Prometheus's default scrape rate).
func BenchmarkRelayAdminCost(b *testing.B) {
	dsn := testenv.Postgres.Addr(b)
	events := 20000
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_EVENTS")); err == nil && n > 0 {
		events = n
	}
	var lines strings.Builder
	for i := range events {
		fmt.Fprintf(&lines, `{"aggregate_type":"payment","aggregate_id":"tx-%d","event_type":"PaymentCaptured","payload":{"n":%d}}`+"\n", i%100, i)
	}
	table := newTable()
	mustCLI(b, "", "migrate", "--db", dsn, "--table", table)
	b.Cleanup(func() { cli(b, "", "migrate", "--down", "--yes", "--db", dsn, "--table", table) })
	interval := time.Second
	if d, err := time.ParseDuration(os.Getenv("OUTBOX_BENCH_ADMIN_INTERVAL")); err == nil && d > 0 {
		interval = d
	}
	rates := map[bool][]float64{}
	cpu := map[bool][]float64{}
	b.ResetTimer()
	for i := range b.N {
		for _, admin := range []bool{i%2 == 0, i%2 != 0} {
			b.StopTimer()
			mustCLI(b, lines.String(), "enqueue", "--db", dsn, "--table", table)
			b.StartTimer()
			rate, cpuPerEvent := drainOnce(b, dsn, table, admin, events, interval)
			rates[admin] = append(rates[admin], rate)
			cpu[admin] = append(cpu[admin], cpuPerEvent)
		}
	}
	b.StopTimer()
	off, on := median(rates[false]), median(rates[true])
	b.ReportMetric(off, "events/s-off")
	b.ReportMetric(on, "events/s-admin")
	b.ReportMetric(100*(off-on)/off, "%slower")
	b.ReportMetric(median(cpu[false]), "cpu-µs/event-off")
	b.ReportMetric(median(cpu[true]), "cpu-µs/event-admin")
	b.Logf("rates off %v, admin %v; cpu µs/event off %v, admin %v", rates[false], rates[true], cpu[false], cpu[true])
}

var finishedRE = regexp.MustCompile(`msg="relay finished" delivered=(\d+) .* rate_per_s=(\d+)`)

// drainOnce runs one drain and returns the relay's rate and its CPU time
// per event in microseconds.
func drainOnce(b *testing.B, dsn, table string, admin bool, events int, interval time.Duration) (float64, float64) {
	b.Helper()
	args := []string{"relay", "--db", dsn, "--table", table, "--sink", "discard://", "--drain", "--batch", "1000",
		"--poll-interval", "20ms", "--progress", "0"}
	if admin {
		args = append(args, "--admin", "127.0.0.1:0", "--gauge-interval", interval.String())
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "OUTBOX_TEST_EXEC_MAIN=1")
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	scraped := make(chan struct{})
	go func() { // Prometheus's part: a scrape every interval
		defer close(scraped)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if m := adminAddrRE.FindStringSubmatch(out.String()); m != nil {
				if resp, err := http.Get("http://" + m[1] + "/metrics"); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}
	}()
	err := cmd.Wait()
	close(stop)
	<-scraped
	if err != nil {
		b.Fatalf("relay: %v\n%s", err, out.String())
	}
	m := finishedRE.FindStringSubmatch(out.String())
	if m == nil || m[1] != strconv.Itoa(events) {
		b.Fatalf("relay did not deliver %d events:\n%s", events, out.String())
	}
	rate, _ := strconv.ParseFloat(m[2], 64)
	st := cmd.ProcessState
	return rate, float64((st.UserTime() + st.SystemTime()).Microseconds()) / float64(events)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
