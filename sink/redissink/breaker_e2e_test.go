package redissink_test

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/internal/testenv"
)

// TestEndToEndServerDownBehindBreaker stops a private redis-server for 2
// minutes (15 s with -short) while `outbox relay` at its default retry and
// breaker settings drains a backlog, then starts it again on its port: the
// routes' breakers open, nothing ends FAILED, no retry is counted beyond
// the opening, and the backlog drains within 60 s of the server's return,
// nothing lost, in order.
func TestEndToEndServerDownBehindBreaker(t *testing.T) {
	t.Parallel()
	outage := e2etest.BrokerOutage(testenv.Short())
	n := 2000
	srv := startServer(t, "--appendonly", "yes", "--appendfsync", "always")
	b := e2etest.NewBacklog(t, "brk_redis", n, e2etest.DefaultAggregates())
	ctx, cancel := context.WithTimeout(context.Background(), outage+4*time.Minute)
	defer cancel()
	// A rate limit keeps most of the backlog waiting when the server stops.
	relay := e2etest.StartCLI(t, append(b.RelayArgs("redis://"+srv.addr()+"/0?timeout=2s&rate=100/s"),
		"--poll-interval", "1s", "--batch", "100")...)
	relay.Await(ctx, t, 100*time.Millisecond, "a first delivery", func() bool { return b.Processed(t) > 0 })
	srv.kill()
	down := time.Now()
	relay.Await(ctx, t, 200*time.Millisecond, "the breaker to open", func() bool { return b.BreakerOpened(t) })
	if err := e2etest.WaitOutage(ctx, outage-time.Since(down)); err != nil {
		t.Fatal(err)
	}
	if err := srv.restart(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	relay.Wait(ctx, t)
	b.CheckOutage(t, n, outage, time.Since(back))
	got, err := readStreams(ctx, newClient(t, srv.addr(), 0), "")
	if err != nil {
		t.Fatal(err)
	}
	e2etest.CheckArrived(t, got, b, func(typ string) string { return typ + ".events" })
}
