package natssink_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// uniq returns a short random name part, so every test has its own
// subjects and streams.
func uniq() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sharedURL returns the shared NATS server (OUTBOX_TEST_NATS), or skips.
func sharedURL(t *testing.T) string { return testenv.NATS.Addr(t) }

func testenvNATS(b testing.TB) string { return testenv.NATS.Addr(b) }

// privateServer is a private JetStream server: a nats-server process
// with a port and store directory of its own, so that a test can stop,
// reconfigure and restart it without touching the shared one.
type privateServer struct {
	bin  string
	name string
	port int
	dir  string
	URL  string

	mu         sync.Mutex
	user, pass string // the credentials the next start asks for; none when empty
	cmd        *exec.Cmd
	done       chan struct{}
	log        testenv.Buffer
}

// natsServerBinary is the nats-server executable, from PATH or Debian's
// /usr/sbin.
func natsServerBinary() (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/nats-server"
	if _, err := os.Stat(debian); err != nil {
		return "", errors.New("nats-server is not on PATH nor in /usr/sbin")
	}
	return debian, nil
}

// startPrivate starts a private server and returns once it accepts
// connections. It skips the test when nats-server is not installed (and
// fails it under CI=true, where it must be).
func startPrivate(t testing.TB) *privateServer {
	t.Helper()
	bin, err := natsServerBinary()
	if err != nil {
		msg := fmt.Sprintf("this test needs a private NATS server (the shared one is never restarted or reconfigured): %v", err)
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e := &privateServer{bin: bin, name: "outbox-test-" + uniq(), port: port, dir: t.TempDir(),
		URL: fmt.Sprintf("nats://127.0.0.1:%d", port)}
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.stop)
	return e
}

// setCredentials sets the user and password the next start asks of
// clients (none when both are empty).
func (e *privateServer) setCredentials(user, pass string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.user, e.pass = user, pass
}

// start starts the server and waits until it accepts connections.
func (e *privateServer) start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(e.port), "-n", e.name, "-js", "-sd", e.dir}
	if e.user != "" {
		args = append(args, "--user", e.user, "--pass", e.pass)
	}
	cmd := exec.Command(e.bin, args...)
	cmd.Stdout, cmd.Stderr = &e.log, &e.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the test binary
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	e.cmd, e.done = cmd, done
	// A slow start on a busy machine is not a failure: the bound is for a
	// server that hangs.
	deadline := time.Now().Add(time.Minute)
	for {
		if serverGreets(e.URL) {
			return nil
		}
		select {
		case <-done:
			e.cmd = nil
			return fmt.Errorf("nats-server on %s exited (%v): %s", e.URL, cmd.ProcessState, lastLines(e.log.String(), 10))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.killLocked()
			return fmt.Errorf("nats-server on %s did not accept connections within a minute: %s", e.URL, lastLines(e.log.String(), 10))
		}
	}
}

// serverGreets reports whether a NATS server listens on url and sends
// its INFO line, which it does once it accepts clients.
func serverGreets(url string) bool {
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "nats://"), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "INFO ")
}

// stop shuts the server down (SIGTERM: it flushes its store and closes
// its clients' connections) and waits for it to exit.
func (e *privateServer) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cmd == nil {
		return
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
		e.cmd = nil
	case <-time.After(30 * time.Second):
		e.killLocked()
	}
}

func (e *privateServer) killLocked() {
	_ = e.cmd.Process.Kill()
	<-e.done
	e.cmd = nil
}

// restart stops the server and starts it again on the same port and
// store directory; the streams survive.
func (e *privateServer) restart(ctx context.Context) error {
	e.stop()
	deadline, ok := ctx.Deadline()
	for {
		err := e.start()
		if err == nil {
			return nil
		}
		if !strings.Contains(err.Error(), "address already in use") || (ok && time.Now().After(deadline)) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond): // the port may linger briefly
		}
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// reader consumes one stream from the start with an ordered consumer and
// records what arrives.
type reader struct {
	url, stream string
	mu          sync.Mutex
	got         []sinktest.Received
	maxSeq      uint64 // highest stream sequence received
	changed     chan struct{}
	nc          *nats.Conn
	js          jetstream.JetStream
	cc          jetstream.ConsumeContext
}

func newReader(t testing.TB, url, stream string) *reader {
	r := &reader{url: url, stream: stream, changed: make(chan struct{})}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.cc != nil {
			r.cc.Stop()
		}
		if r.nc != nil {
			r.nc.Close()
		}
	})
	return r
}

// start subscribes, once the stream exists.
func (r *reader) start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cc != nil {
		return nil
	}
	if r.nc == nil {
		nc, err := nats.Connect(r.url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			return err
		}
		r.nc = nc
	}
	js, err := jetstream.New(r.nc)
	if err != nil {
		return err
	}
	r.js = js
	c, err := js.OrderedConsumer(ctx, r.stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("consume stream %s: %w", r.stream, err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		rec := received(m)
		md, _ := m.Metadata()
		r.mu.Lock()
		r.got = append(r.got, rec)
		if md != nil {
			r.maxSeq = max(r.maxSeq, md.Sequence.Stream)
		}
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	})
	if err != nil {
		return err
	}
	r.cc = cc
	return nil
}

func received(m jetstream.Msg) sinktest.Received {
	h := m.Headers()
	headers := make(map[string]string, len(h))
	for k, v := range h {
		if len(v) > 0 {
			headers[k] = v[0]
		}
	}
	return sinktest.Received{
		EventID:       h.Get(sink.HeaderEventID),
		AggregateType: h.Get(sink.HeaderAggregateType),
		AggregateID:   h.Get(sink.HeaderAggregateID),
		EventType:     h.Get(sink.HeaderEventType),
		Headers:       headers,
		Payload:       append([]byte(nil), m.Data()...),
		Destination:   m.Subject(),
	}
}

// Read waits until n messages arrived, and every message the stream held
// when Read was called, or until ctx ends.
func (r *reader) Read(ctx context.Context, n int) ([]sinktest.Received, error) {
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	last, err := r.lastSeq(ctx)
	if err != nil {
		return nil, err
	}
	for {
		r.mu.Lock()
		got, changed, seen := append([]sinktest.Received(nil), r.got...), r.changed, r.maxSeq
		r.mu.Unlock()
		if len(got) >= n && seen >= last {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return got, ctx.Err()
		case <-changed:
		}
	}
}

// lastSeq returns the stream's last sequence, retrying while the server
// is unreachable (a restart) until ctx ends.
func (r *reader) lastSeq(ctx context.Context) (uint64, error) {
	for {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := r.js.Stream(ictx, r.stream)
		cancel()
		if err == nil {
			return st.CachedInfo().State.LastSeq, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("stream %s info: %w", r.stream, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// deleteStream removes a test's stream from a server.
func deleteStream(t testing.TB, url, name string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = js.DeleteStream(ctx, name)
}

// jsClient returns a JetStream client on url, closed at cleanup.
func jsClient(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	// Reconnect quickly after a restart, so that the test sees the server
	// back as soon as the sink does.
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// bigPayload returns a JSON payload of at least n bytes.
func bigPayload(n int) []byte {
	return []byte(`{"pad":"` + strings.Repeat("x", n) + `"}`)
}
