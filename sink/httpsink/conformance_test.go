package httpsink_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// receiver is a restartable HTTP endpoint that records what arrives and
// answers 400 to events of type "Poison".
type receiver struct {
	mu      sync.Mutex
	got     []sinktest.Received
	changed chan struct{}
	addr    string
	srv     *http.Server
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if req.Header.Get("Outbox-Event-Type") == "Poison" {
		http.Error(w, "invalid request", http.StatusBadRequest)
		return
	}
	headers := map[string]string{}
	for k := range req.Header {
		headers[k] = req.Header.Get(k)
	}
	r.mu.Lock()
	r.got = append(r.got, sinktest.Received{
		EventID:       req.Header.Get("Idempotency-Key"),
		AggregateType: req.Header.Get("Outbox-Aggregate-Type"),
		AggregateID:   req.Header.Get("Outbox-Aggregate-Id"),
		EventType:     req.Header.Get("Outbox-Event-Type"),
		Headers:       headers,
		Payload:       body,
		Destination:   req.URL.Path,
	})
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) start(t *testing.T, addr string) {
	var ln net.Listener
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err = net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		tick := time.NewTimer(20 * time.Millisecond) // the port may linger briefly after a close
		<-tick.C
	}
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	r.addr = ln.Addr().String()
	r.srv = &http.Server{Handler: r}
	go r.srv.Serve(ln)
}

func (r *receiver) read(ctx context.Context, n int) ([]sinktest.Received, error) {
	for {
		r.mu.Lock()
		got, changed := append([]sinktest.Received(nil), r.got...), r.changed
		r.mu.Unlock()
		if len(got) >= n {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return got, ctx.Err()
		case <-changed:
		}
	}
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Features{OrderedPerKey: true, Receipts: "http"}, func(t *testing.T) *sinktest.Harness {
		r := &receiver{changed: make(chan struct{})}
		r.start(t, "127.0.0.1:0")
		t.Cleanup(func() { r.srv.Close() })
		base := "http://" + r.addr
		s, err := httpsink.New(httpsink.Config{URL: base + "/approve", Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return &sinktest.Harness{
			Sink: s,
			Read: r.read,
			Poison: func(m outbox.Message) outbox.Message {
				m.EventType = "Poison"
				return m
			},
			Restart: func(ctx context.Context) error {
				addr := r.addr
				if err := r.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
					return err
				}
				r.start(t, addr)
				if !strings.Contains(r.addr, ":") {
					return errors.New("restart: no address")
				}
				return nil
			},
			RouteOf: func(rec sinktest.Received) string { return base + rec.Destination },
			Unreachable: func(t *testing.T) sink.Sink {
				s, err := httpsink.New(httpsink.Config{URL: "http://" + sinktest.ClosedAddr(t) + "/approve", Timeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
		}
	})
}
