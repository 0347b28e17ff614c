package redissink_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/redissink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// uniquePrefix names this test's streams, so that no two tests (or
// reruns) share one on the shared server.
func uniquePrefix(t testing.TB) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	return "outbox-test:" + strings.Trim(name, "-") + "-" + hex.EncodeToString(b)
}

// sharedRedis returns the address of the Redis at OUTBOX_TEST_REDIS (skips
// when unreachable, fails under CI=true).
func sharedRedis(t testing.TB) (addr string, db int) {
	t.Helper()
	u, err := url.Parse(testenv.Redis.Addr(t))
	if err != nil {
		t.Fatalf("OUTBOX_TEST_REDIS: %v", err)
	}
	if d := strings.Trim(u.Path, "/"); d != "" {
		db, _ = strconv.Atoi(d)
	}
	return u.Host, db
}

// newClient returns a client for the test's own reads and setup.
func newClient(t testing.TB, addr string, db int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db, DialTimeout: 2 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// dropPrefix deletes the test's keys once it ends.
func dropPrefix(t testing.TB, c *redis.Client, prefix string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
}

// server is a private redis-server process on a port of its own, which a
// test may kill and start again. The shared server is never restarted.
type server struct {
	t    testing.TB
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// startServer starts redis-server with the given extra arguments (the
// default keeps nothing on disk). It skips (fails under CI=true) when the
// binary is missing.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		msg := "redis-server is not installed: the restart tests need it to run a private server"
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s := &server{t: t, dir: t.TempDir(), args: args}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for try := 0; try < 5; try++ {
		if s.port, err = testenv.FreePort(); err != nil {
			continue
		}
		if err = s.start(ctx); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

func (s *server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// start runs the process and returns once it answers PING.
func (s *server) start(ctx context.Context) error {
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--daemonize", "no", "--dir", s.dir, "--logfile", ""}, s.args...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	c := redis.NewClient(&redis.Options{Addr: s.addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var reply redis.Error
		if err := c.Ping(ctx).Err(); err == nil || errors.As(err, &reply) { // any reply (NOAUTH too) means it is up
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited at start (port taken?)", s.port)
		case <-ctx.Done():
			s.kill()
			return fmt.Errorf("redis-server on port %d did not answer PING: %w", s.port, ctx.Err())
		case <-tick.C:
		}
	}
}

// kill stops the process at once (SIGKILL) and waits for it to exit.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// restart kills the server and starts it again on the same port.
func (s *server) restart(ctx context.Context) error {
	s.kill()
	var err error
	for ctx.Err() == nil {
		if err = s.start(ctx); err == nil {
			return nil
		}
	}
	return fmt.Errorf("restart redis-server: %w (last error: %v)", ctx.Err(), err)
}

// readStreams returns every entry of the streams whose name starts with
// prefix, merged in entry-id order (the order they were appended in).
func readStreams(ctx context.Context, c *redis.Client, prefix string) ([]sinktest.Received, error) {
	var names []string
	iter := c.ScanType(ctx, 0, prefix+"*", 1000, "stream").Iterator()
	for iter.Next(ctx) {
		names = append(names, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	type entry struct {
		ms, seq uint64
		r       sinktest.Received
	}
	var all []entry
	for _, name := range names {
		msgs, err := c.XRange(ctx, name, "-", "+").Result()
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			ms, seq, _ := strings.Cut(m.ID, "-")
			e := entry{r: received(name, m.Values)}
			e.ms, _ = strconv.ParseUint(ms, 10, 64)
			e.seq, _ = strconv.ParseUint(seq, 10, 64)
			all = append(all, e)
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].ms != all[j].ms {
			return all[i].ms < all[j].ms
		}
		return all[i].seq < all[j].seq
	})
	out := make([]sinktest.Received, len(all))
	for i, e := range all {
		out[i] = e.r
	}
	return out, nil
}

// received maps a stream entry's fields.
func received(stream string, values map[string]any) sinktest.Received {
	h := make(map[string]string, len(values))
	for k, v := range values {
		h[k], _ = v.(string)
	}
	payload := h[redissink.FieldPayload]
	delete(h, redissink.FieldPayload)
	return sinktest.Received{
		EventID:       h[sink.HeaderEventID],
		AggregateType: h[sink.HeaderAggregateType],
		AggregateID:   h[sink.HeaderAggregateID],
		EventType:     h[sink.HeaderEventType],
		Headers:       h,
		Payload:       []byte(payload),
		Destination:   stream,
	}
}

// waitStreams waits until the prefix's streams hold at least n entries, or
// ctx ends, and returns them all.
func waitStreams(ctx context.Context, c *redis.Client, prefix string, n int) ([]sinktest.Received, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := readStreams(ctx, c, prefix)
		if err == nil && len(got) >= n {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return got, fmt.Errorf("%d of %d entries: %w (last error: %v)", len(got), n, ctx.Err(), err)
		case <-tick.C:
		}
	}
}
