package benchkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// GatewaySystem is a System that can deliver to an HTTP endpoint on its
// own, with several relays at once: the gateway scenario.
type GatewaySystem interface {
	System
	// GatewayLoad writes events, untimed, as events to be delivered to
	// the gateway (for most systems the same as Load).
	GatewayLoad(ctx context.Context, events []Event) error
	// GatewayPending counts the events loaded by GatewayLoad that are not
	// yet delivered and recorded as done.
	GatewayPending(ctx context.Context) (int64, error)
	// StartGateway starts target.Relays relays (each as a separate process
	// would run it: its own database pool and HTTP client) that POST every
	// event's payload, as the body, to target.URL. It returns at once;
	// stop stops them all and waits for them.
	StartGateway(ctx context.Context, target GatewayTarget) (stop func() error, err error)
}

// GatewayTarget is where and how StartGateway delivers.
type GatewayTarget struct {
	// URL is the gateway's endpoint (http://127.0.0.1:port/events).
	URL string
	// Relays is the number of relays to run at once.
	Relays int
	// Aggregates is the number of aggregates the events are spread over:
	// the most requests that per-aggregate order lets be in flight.
	Aggregates int
}

// Gateway is an HTTP endpoint that takes a fixed time per request, as a
// remote API would, and checks what it gets: every POST's body is an
// event payload written by NewEvent, whose aggregate is its sequence
// number modulo the aggregates. It counts each event once, the repeats,
// and the events that arrived after a later event of their aggregate.
type Gateway struct {
	delay      time.Duration
	aggregates int64
	events     int64

	mu      sync.Mutex
	arrived []bool  // by sequence number
	last    []int64 // by aggregate: the highest sequence number arrived, -1 for none
	done    []bool  // by sequence number: answered 2xx after the delay
	doneN   atomic.Int64

	duplicates atomic.Int64
	violations atomic.Int64
	invalid    atomic.Int64
	firstBad   atomic.Pointer[string]

	srv *http.Server
	ln  net.Listener
}

// NewGateway starts a gateway on a loopback port that answers every POST
// after delay, for events with sequence numbers 0 to events-1 spread over
// aggregates.
func NewGateway(delay time.Duration, events, aggregates int) (*Gateway, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("gateway: listen on a loopback port: %w", err)
	}
	g := &Gateway{delay: delay, aggregates: int64(max(aggregates, 1)), events: int64(events), ln: ln}
	g.Reset()
	g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = g.srv.Serve(ln) }()
	return g, nil
}

// URL is the endpoint to POST events to.
func (g *Gateway) URL() string { return "http://" + g.ln.Addr().String() + "/events" }

// Reset forgets every event and count, for the next run.
func (g *Gateway) Reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.arrived = make([]bool, g.events)
	g.done = make([]bool, g.events)
	g.last = make([]int64, g.aggregates)
	for i := range g.last {
		g.last[i] = -1
	}
	g.doneN.Store(0)
	g.duplicates.Store(0)
	g.violations.Store(0)
	g.invalid.Store(0)
	g.firstBad.Store(nil)
}

// Delivered is the number of distinct events answered with 2xx.
func (g *Gateway) Delivered() int64 { return g.doneN.Load() }

// Duplicates is the number of requests for an event that had arrived before.
func (g *Gateway) Duplicates() int64 { return g.duplicates.Load() }

// Violations is the number of events that arrived after a later event of
// their aggregate.
func (g *Gateway) Violations() int64 { return g.violations.Load() }

// Invalid returns the number of requests that were not a POST of a known
// event, with the first one's description.
func (g *Gateway) Invalid() (int64, string) {
	n := g.invalid.Load()
	if p := g.firstBad.Load(); p != nil {
		return n, *p
	}
	return n, ""
}

// Close stops the gateway.
func (g *Gateway) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return g.srv.Shutdown(ctx)
}

func (g *Gateway) bad(format string, args ...any) {
	g.invalid.Add(1)
	s := fmt.Sprintf(format, args...)
	g.firstBad.CompareAndSwap(nil, &s)
}

// ServeHTTP checks the request at once, then answers 204 after the delay.
// A request it cannot read is answered 204 too, and counted as invalid,
// so that a sender's retries do not hide it: the run reports it.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	seq := Seq(body)
	switch {
	case r.Method != http.MethodPost:
		g.bad("method %s, want POST", r.Method)
	case err != nil:
		g.bad("read the body: %v", err)
	case seq < 0 || seq >= g.events:
		g.bad("body %.40q has no sequence number below %d", body, g.events)
		seq = -1
	}
	if seq >= 0 {
		agg := seq % g.aggregates
		if h := r.Header.Get("Outbox-Aggregate-Id"); h != "" && h != "pay-"+strconv.FormatInt(agg, 10) {
			g.bad("event %d came with Outbox-Aggregate-Id %q, want pay-%d", seq, h, agg)
		}
		g.mu.Lock()
		switch {
		case g.arrived[seq]:
			g.duplicates.Add(1)
		case seq < g.last[agg]:
			g.violations.Add(1)
			g.arrived[seq] = true
		default:
			g.arrived[seq] = true
			g.last[agg] = seq
		}
		g.mu.Unlock()
	}
	t := time.NewTimer(g.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	if seq >= 0 {
		g.mu.Lock()
		if !g.done[seq] {
			g.done[seq] = true
			g.doneN.Add(1)
		}
		g.mu.Unlock()
	}
	w.WriteHeader(http.StatusNoContent)
}

// errInvalidRequests is returned when the gateway saw requests it could
// not take as events.
var errInvalidRequests = errors.New("the gateway got requests that are not events")
