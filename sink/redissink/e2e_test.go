package redissink_test

// End-to-end: the real `outbox` binary drains a PostgreSQL outbox into
// Redis streams, and a consumer written here reads them back.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/internal/testenv"
)

// TestMain fails the package's tests if a goroutine they started is
// still running once they all passed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestEndToEnd: `outbox relay --drain` delivers 2000 events of payment and
// merchant aggregates to the shared Redis; payment events go to
// <prefix>.payment.events and merchant events to <prefix>.merchant.audit
// (--route).
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	n := 2000
	if testenv.Short() {
		n = 300
	}
	addr, db := sharedRedis(t)
	prefix := uniquePrefix(t)
	c := newClient(t, addr, db)
	dropPrefix(t, c, prefix)
	b := e2etest.NewBacklog(t, "redis_e2e", n, e2etest.DefaultAggregates())

	e2etest.RunCLI(t, "", b.RelayArgs(fmt.Sprintf("redis://%s/%d?stream=%s.{aggregate_type}.events", addr, db, prefix),
		"--route", "merchant="+prefix+".merchant.audit")...)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := readStreams(ctx, c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	dups := e2etest.CheckArrived(t, got, b, func(typ string) string {
		if typ == "merchant" {
			return prefix + ".merchant.audit"
		}
		return prefix + "." + typ + ".events"
	})
	if dups != 0 {
		t.Fatalf("%d duplicates with no fault", dups)
	}
	if got := b.Processed(t); got != n {
		t.Fatalf("%d of %d events PROCESSED after the drain", got, n)
	}
}

// TestEndToEndServerRestart kills and restarts a private redis-server
// while a relay process is draining a backlog into it, with the relay's
// writes paused (CLIENT PAUSE) at that moment so that a pipeline is in
// flight. The server appends to its AOF with fsync on every write
// (appendfsync always), so every entry it acknowledged survives the kill:
// the test can then check that nothing is lost. (A server that keeps
// nothing on disk, like the shared one, loses its streams on a restart by
// design; the conformance suite covers reconnecting to such a server.)
func TestEndToEndServerRestart(t *testing.T) {
	t.Parallel()
	n := 6000
	if testenv.Short() {
		n = 1000
	}
	srv := startServer(t, "--appendonly", "yes", "--appendfsync", "always")
	c := newClient(t, srv.addr(), 0)
	b := e2etest.NewBacklog(t, "redis_e2e", n, e2etest.DefaultAggregates())

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	relay := e2etest.StartCLI(t, b.RelayArgs("redis://"+srv.addr()+"/0?timeout=2s", "--batch", "100",
		"--max-retries", "1000", "--backoff-min", "10ms", "--backoff-max", "200ms", "--poll-interval", "50ms")...)

	// Wait for part of the backlog, then hold the relay's writes.
	written := func() int64 {
		p, _ := c.XLen(ctx, "payment.events").Result()
		m, _ := c.XLen(ctx, "merchant.events").Result()
		return p + m
	}
	relay.Await(ctx, t, 5*time.Millisecond, fmt.Sprintf("%d entries written", n/10), func() bool { return written() >= int64(n/10) })
	if err := c.Do(ctx, "CLIENT", "PAUSE", "60000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	if relay.Exited() {
		t.Fatalf("the relay exited (%v) before the restart", relay.Err())
	}
	before := written()
	if before >= int64(n) {
		t.Fatalf("all %d events were written before the restart: the test restarted nothing mid-drain", n)
	}
	if err := srv.restart(ctx); err != nil {
		t.Fatal(err)
	}
	relay.Wait(ctx, t)

	got, err := readStreams(ctx, c, "")
	if err != nil {
		t.Fatal(err)
	}
	dups := e2etest.CheckArrived(t, got, b, func(typ string) string { return typ + ".events" })
	if dups > 2*100 {
		t.Fatalf("%d duplicates after one server restart with batches of 100: more than the work in flight", dups)
	}
	if got := b.Processed(t); got != n {
		t.Fatalf("%d of %d events PROCESSED after the drain", got, n)
	}
	t.Logf("server killed mid-drain after %d of %d entries: 0 lost, %d duplicates", before, n, dups)
}

// TestEndToEndServerUpAfterRelayStarts starts the relay while no Redis
// listens on its port: it waits, says so at WARN, and delivers the whole
// backlog once a private redis-server starts there. The URL's limits
// (rate=, burst=) hold the drain to at most burst + rate*t, and a
// --route-limit lifts them for merchant events.
func TestEndToEndServerUpAfterRelayStarts(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	srv.kill()
	const n, rate, burst = 300, 400.0, 20
	b := e2etest.NewBacklog(t, "redis_e2e", n, e2etest.Aggregates(8, 4))
	start := time.Now()
	relay := e2etest.StartCLI(t, b.RelayArgs(fmt.Sprintf("redis://%s/0?stream=late.{aggregate_type}&rate=%v/s&burst=%d", srv.addr(), rate, burst),
		"--route-limit", "late.merchant=rate=0")...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	relay.Await(ctx, t, 20*time.Millisecond, "a WARN that Redis is unreachable", func() bool {
		return strings.Contains(relay.Log(), "level=WARN") && strings.Contains(relay.Log(), "unreachable")
	})
	if err := srv.restart(ctx); err != nil {
		t.Fatal(err)
	}
	relay.Wait(ctx, t)
	elapsed := time.Since(start)
	if !strings.Contains(relay.Log(), "sink limits") {
		t.Errorf("the relay did not log its limits:\n%s", relay.Log())
	}
	if got := b.Processed(t); got != n {
		t.Fatalf("%d of %d events PROCESSED", got, n)
	}
	c := newClient(t, srv.addr(), 0)
	got, err := readStreams(ctx, c, "late.")
	if err != nil {
		t.Fatal(err)
	}
	if dups := e2etest.CheckArrived(t, got, b, func(typ string) string { return "late." + typ }); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
	// The payment events (3 in 4) went at most burst + rate*t.
	if payments := n * 2 / 3; float64(payments) > burst+rate*elapsed.Seconds() {
		t.Fatalf("%d payment events in %s: over the limit of %v/s, burst %d", payments, elapsed, rate, burst)
	}
}
