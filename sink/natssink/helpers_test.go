package natssink_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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

// embedded is a private JetStream server on a fixed port and store
// directory, so that it can be restarted without touching the shared one.
type embedded struct {
	t    testing.TB
	mu   sync.Mutex
	opts *server.Options
	srv  *server.Server
	URL  string
}

func startEmbedded(t testing.TB) *embedded {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e := &embedded{t: t, opts: &server.Options{
		ServerName: "outbox-test-" + uniq(),
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		NoLog:      true,
		NoSigs:     true,
	}, URL: fmt.Sprintf("nats://127.0.0.1:%d", port)}
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.stop)
	return e
}

func (e *embedded) start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	opts := *e.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		return err
	}
	go srv.Start()
	if !srv.ReadyForConnections(20 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("embedded NATS server on %s did not start", e.URL)
	}
	e.srv = srv
	return nil
}

func (e *embedded) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		e.srv = nil
	}
}

// restart stops the server and starts it again on the same port and
// store directory; the streams survive.
func (e *embedded) restart(ctx context.Context) error {
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
