package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// TestEnqueueErrorSaysEnqueueOnce: a store error of `outbox enqueue` (here
// a table that was never migrated) reads "enqueue: ..." once, not
// "enqueue: enqueue: ...", on every backend.
func TestEnqueueErrorSaysEnqueueOnce(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			_, errOut, code := cli(t, eventLines(1, 1, ""), "enqueue", "--db", bc.dsn(t), "--table", newTable())
			if code == 0 || !strings.HasPrefix(errOut, "outbox: enqueue: ") || strings.Contains(errOut, "enqueue: enqueue:") ||
				!strings.Contains(errOut, "run `outbox migrate` first") || !strings.Contains(errOut, "nothing was enqueued") {
				t.Errorf("enqueue into a table never migrated: exit %d, stderr %q; want one \"enqueue: \" prefix, the fix and \"nothing was enqueued\"", code, errOut)
			}
		})
	}
}

// unreachableSink is a broker sink whose destination never answers: it
// logs its failure once, as the broker sinks do (sinkkit.Reachability).
type unreachableSink struct{ reach *sinkkit.Reachability }

func (s *unreachableSink) Publish(_ context.Context, msgs []outbox.Message) []error {
	return sinkkit.Fill(len(msgs), errors.New("not connected"))
}
func (s *unreachableSink) Close(context.Context) error { return nil }
func (s *unreachableSink) Reachable() (bool, error, time.Time) {
	return s.reach.Reachable()
}

// TestWaitForSinkSaysTheErrorOnce: while the relay waits for a broker
// that refuses connections, the refusal is logged once (by the sink), not
// again by the relay's "waiting for it" line; the error at the end of
// --start-wait says it.
func TestWaitForSinkSaysTheErrorOnce(t *testing.T) {
	t.Parallel()
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	sk := &unreachableSink{reach: sinkkit.NewReachability().Logging(log, "nats sink", "server", "127.0.0.1:1")}
	sk.reach.Failed(errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
	err := waitForSink(context.Background(), "nats://127.0.0.1:1?subject=x", sk, 100*time.Millisecond, log)
	if err == nil || !strings.Contains(err.Error(), "after --start-wait 100ms: dial tcp 127.0.0.1:1: connect: connection refused") {
		t.Errorf("waitForSink = %v, want the refusal after --start-wait", err)
	}
	out := logged.String()
	if n := strings.Count(out, "connection refused"); n != 1 {
		t.Errorf("the log says the refusal %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "waiting for it before claiming events") {
		t.Errorf("the relay did not say it waits:\n%s", out)
	}
}

// TestRedisConnectionErrorOnce: a relay whose Redis refuses connections
// prints the refusal as the sink's WARN and in the final error, and the
// Redis client's own log lines ("connection pool: failed to dial") do not
// reach stderr beside them.
func TestRedisConnectionErrorOnce(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "outbox.db")
	mustCLI(t, "", "migrate", "--db", db)
	cmd, out := startProcess(t, nil, "relay", "--db", db, "--sink", "redis://127.0.0.1:"+strconv.Itoa(closedPort(t))+"/0?stream=x", "--start-wait", "1500ms")
	if err := cmd.Wait(); err == nil {
		t.Fatalf("relay with an unreachable Redis exited 0:\n%s", out.String())
	}
	if text := out.String(); strings.Contains(text, "connection pool") || !strings.Contains(text, "redis sink: the destination is unreachable") ||
		!strings.Contains(text, "still unreachable after --start-wait") {
		t.Errorf("stderr:\n%s\nwant the sink's WARN and the final error, and no line of the Redis client's own", text)
	}
}

// closedPort returns a loopback port where nothing listens.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
