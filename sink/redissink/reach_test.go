package redissink_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/redissink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// A sink made while no server listens: New succeeds, publishes fail
// retryably, Reachable says why; once a redis-server starts on that port,
// the sink reaches it and delivers.
func TestServerDownAtStart(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	srv.kill()
	s := newSink(t, redissink.Config{Addr: srv.addr(), Password: "s3cret-pass", Route: "late.{aggregate_type}", Timeout: time.Second, DialTimeout: 200 * time.Millisecond})
	res := s.Publish(context.Background(), []outbox.Message{sinktest.Message("a", 0), sinktest.Message("a", 1)})
	for i, err := range res {
		if err == nil || outbox.IsPermanent(err) || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("result %d with no server: %v, want retryable without the password", i, err)
		}
	}
	sinktest.Eventually(t, 10*time.Second, "Reachable to report the server down", func() bool {
		ok, err, _ := s.Reachable()
		return !ok && err != nil && strings.Contains(err.Error(), srv.addr()) && !strings.Contains(err.Error(), "s3cret")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv.args = []string{"--requirepass", "s3cret-pass"}
	if err := srv.restart(ctx); err != nil {
		t.Fatal(err)
	}
	sinktest.Eventually(t, 30*time.Second, "the sink to reach the server", func() bool { ok, _, _ := s.Reachable(); return ok })
	m := sinktest.Message("a", 2)
	if res := s.Publish(ctx, []outbox.Message{m}); res[0] != nil {
		t.Fatalf("publish once the server is up: %v", res[0])
	}
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), Password: "s3cret-pass"})
	defer c.Close()
	if n, err := c.XLen(ctx, "late.payment").Result(); err != nil || n != 1 {
		t.Fatalf("stream late.payment holds %d entries (%v), want 1", n, err)
	}
}

// Stream keys that routing computes are checked: empty, too long, not
// UTF-8 or with control characters fail that event for good, naming the
// field, and no key is written.
func TestInvalidStreamKeyIsPermanent(t *testing.T) {
	t.Parallel()
	addr, db := sharedRedis(t)
	prefix := uniquePrefix(t)
	c := newClient(t, addr, db)
	dropPrefix(t, c, prefix)
	s := newSink(t, redissink.Config{Addr: addr, DB: db, Route: prefix + ".{aggregate_type}"})
	if got := s.Destination(&outbox.Message{AggregateType: "payment"}); got != prefix+".payment" {
		t.Fatalf("Destination = %q", got)
	}
	for _, bad := range []string{"a\x01b", strings.Repeat("k", 1100), "bad\xff", "line\nbreak"} {
		msgs := []outbox.Message{sinktest.Message("a", 0), sinktest.Message("a", 1), sinktest.Message("good", 0)}
		msgs[0].AggregateType, msgs[1].AggregateType = bad, bad
		res := s.Publish(context.Background(), msgs)
		var de *sink.DestinationError
		if !outbox.IsPermanent(res[0]) || !errors.As(res[0], &de) || de.Kind != "stream key" || !strings.Contains(res[0].Error(), "aggregate_type") {
			t.Errorf("aggregate type %.20q: %v, want a permanent stream-key DestinationError", bad, res[0])
		}
		if !errors.Is(res[1], outbox.ErrNotAttempted) || res[2] != nil {
			t.Errorf("after the refused event: %v (want not attempted), other aggregate: %v", res[1], res[2])
		}
	}
	keys, err := c.Keys(context.Background(), prefix+"*").Result()
	if err != nil || len(keys) != 1 || keys[0] != prefix+".payment" {
		t.Fatalf("keys written: %v (%v), want only %s.payment", keys, err, prefix)
	}
	if _, err := redissink.New(context.Background(), redissink.Config{Addr: addr, Route: "tab\there"}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("a literal route with a tab: %v, want ErrInvalidConfig", err)
	}
}
