package httpsink

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// chains is how Publish links the messages of each ordering key, now
// shared by the sinks as sinkkit.KeyChains.
var chains = sinkkit.KeyChains

// waitLimit bounds every wait on a condition in these tests, and every
// test context: it bounds a hang, so it is long. No test waits it out on
// purpose; under -race on a loaded machine, 400 requests through the
// sink can take longer than 10 s.
const waitLimit = 2 * time.Minute

// message returns a message of aggregate payment/<aggID> whose payload
// carries n.
func message(aggID string, n int) outbox.Message {
	return outbox.Message{
		ID:            int64(n + 1),
		EventID:       outbox.NewEventID(),
		AggregateType: "payment",
		AggregateID:   aggID,
		EventType:     "ApprovalRequested",
		Payload:       json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)),
		Attempt:       1,
		CreatedAt:     time.Now(),
	}
}

// received is one request as the test server saw it.
type received struct {
	Header http.Header
	Body   []byte
	Method string
	Path   string
	Query  string
}

// recorder is a test endpoint that records every request and answers with
// respond (default 204).
type recorder struct {
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []received
	respond func(w http.ResponseWriter, r *http.Request, body []byte)
}

func newRecorder(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, body []byte)) *recorder {
	t.Helper()
	return newRecorderWith(t, respond, nil)
}

// newRecorderWith is newRecorder with a hook to configure the server
// before it starts.
func newRecorderWith(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, body []byte), configure func(*http.Server)) *recorder {
	t.Helper()
	rec := &recorder{respond: respond}
	rec.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("test server: read body: %v", err)
		}
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, received{Header: r.Header.Clone(), Body: body, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery})
		rec.mu.Unlock()
		if rec.respond != nil {
			rec.respond(w, r, body)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	if configure != nil {
		configure(rec.srv.Config)
	}
	rec.srv.Start()
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *recorder) requests() []received {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]received(nil), rec.reqs...)
}

// newSink returns a sink for cfg, closed when the test ends.
func newSink(t *testing.T, cfg Config) *Sink {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// testContext returns a context that ends with the test or after waitLimit.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// waitFor fails the test unless ch is ready within waitLimit.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out after %s waiting for %s", waitLimit, what)
		var zero T
		return zero
	}
}
