package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/txoutbox/outbox"
)

// GatewayPath is where the gateway takes events: every relay POSTs there.
const GatewayPath = "/events"

// GatewayConfig configures the mock payment gateway. The zero value is a
// gateway that answers at once and never fails.
type GatewayConfig struct {
	// Latency is the mean time the gateway takes per request; each request
	// waits a uniform random 0.5x to 1.5x of it.
	Latency time.Duration
	// FailRate is the share of requests answered 503 at random, from 0 to 1.
	FailRate float64
	// PoisonMerchant is a merchant whose requests are invalid: they are
	// answered 400 Bad Request, a permanent failure. Empty: none.
	PoisonMerchant string
	// Seed seeds the random latency and failures.
	Seed uint64
}

// Delivery is an event the gateway accepted (answered 2xx) for the first
// time.
type Delivery struct {
	EventID       string
	AggregateType string
	AggregateID   string
	EventType     string
	Seq           int
	// Relay is the ?relay= query parameter of the request: which relay sent it.
	Relay string
	// Compensates is the id of the expired event a compensating event
	// stands for; empty for other events.
	Compensates string
	At          time.Time
}

// Aggregate returns "type/id".
func (d Delivery) Aggregate() string { return d.AggregateType + "/" + d.AggregateID }

// Violation is an event accepted after a later one of its aggregate.
type Violation struct {
	Aggregate string
	EventID   string
	Seq       int // the sequence number of the event accepted
	After     int // the highest sequence number accepted before it
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: event %s (seq %d) arrived after seq %d", v.Aggregate, v.EventID, v.Seq, v.After)
}

// Held is a request the gateway holds without answering (see HoldNext).
type Held struct {
	EventID       string
	AggregateType string
	AggregateID   string
	EventType     string
	Relay         string
}

// Gateway is a mock payment gateway on 127.0.0.1: real HTTP, configurable
// latency, random failures and outages, and one invalid merchant. It checks
// Idempotency-Key and counts the repeats it receives, and records per
// aggregate the order of what it accepted, from the "seq" field every
// payload carries.
type Gateway struct {
	cfg    GatewayConfig
	srv    *http.Server
	url    string
	served chan struct{}

	closeOnce sync.Once
	closing   chan struct{}

	mu         sync.Mutex
	rnd        *rand.Rand
	down       bool
	requests   int
	byStatus   map[int]int
	accepted   map[string]Delivery
	order      []string
	lastSeq    map[string]int
	violations []Violation
	duplicates int
	dupByEvent map[string]int
	outageHits map[string]bool
	outageBy   map[string]int  // 503s of the last outage, by relay
	refused    map[string]bool // events of the poison merchant refused (400)
	byRelay    map[string]int
	latency    time.Duration
	compByType map[string]int // first acceptances of compensating events, by event type
	hold       *hold          // armed by HoldNext, not yet used
	holding    *hold          // holding a request
}

type hold struct {
	relay   string
	held    chan Held
	release chan struct{}
}

// StartGateway listens on a random port of 127.0.0.1 and serves until Close.
func StartGateway(cfg GatewayConfig) (*Gateway, error) {
	if cfg.FailRate < 0 || cfg.FailRate > 1 {
		return nil, fmt.Errorf("%w: gateway failure rate %v: use 0 to 1", outbox.ErrInvalidConfig, cfg.FailRate)
	}
	if cfg.Latency < 0 {
		return nil, fmt.Errorf("%w: gateway latency %s is negative", outbox.ErrInvalidConfig, cfg.Latency)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("gateway: listen on 127.0.0.1: %w", err)
	}
	g := &Gateway{
		cfg:        cfg,
		url:        "http://" + ln.Addr().String(),
		served:     make(chan struct{}),
		closing:    make(chan struct{}),
		rnd:        rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		byStatus:   map[int]int{},
		accepted:   map[string]Delivery{},
		lastSeq:    map[string]int{},
		dupByEvent: map[string]int{},
		outageHits: map[string]bool{},
		outageBy:   map[string]int{},
		refused:    map[string]bool{},
		byRelay:    map[string]int{},
		latency:    cfg.Latency,
		compByType: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+GatewayPath, g.serveEvent)
	g.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(g.served)
		_ = g.srv.Serve(ln)
	}()
	return g, nil
}

// URL returns the base URL, e.g. http://127.0.0.1:41234.
func (g *Gateway) URL() string { return g.url }

// EventsURL returns the URL relays deliver to; relay names the sender in
// the query (the HTTP sink passes query parameters through).
func (g *Gateway) EventsURL(relay string) string {
	return g.url + GatewayPath + "?relay=" + relay
}

// Close stops the gateway: held requests return, connections close.
func (g *Gateway) Close() error {
	g.closeOnce.Do(func() { close(g.closing) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := g.srv.Shutdown(ctx)
	if err != nil {
		err = g.srv.Close()
	}
	<-g.served
	return err
}

// SetDown starts (true) or ends (false) an outage: while down, every
// request is answered 503.
func (g *Gateway) SetDown(down bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down = down
	if down {
		clear(g.outageHits)
		clear(g.outageBy)
	}
}

// SetLatency changes the mean time the gateway takes per request (a slow
// gateway builds a backlog); 0 restores the configured latency.
func (g *Gateway) SetLatency(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if d <= 0 {
		d = g.cfg.Latency
	}
	g.latency = d
}

// IsDown reports whether an outage is on.
func (g *Gateway) IsDown() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down
}

// OutageHits returns the event ids answered 503 during the last outage.
func (g *Gateway) OutageHits() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return sortedKeys(g.outageHits)
}

// MostOutageRequests returns the most requests one relay sent during the
// last outage (each answered 503), and that relay.
func (g *Gateway) MostOutageRequests() (n int, relay string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for r, c := range g.outageBy {
		if c > n || (c == n && r < relay) {
			n, relay = c, r
		}
	}
	return n, relay
}

// PoisonRefused returns the ids of the poison merchant's events the
// gateway refused (400 Bad Request).
func (g *Gateway) PoisonRefused() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return sortedKeys(g.refused)
}

// sortedKeys returns the keys of set in order.
func sortedKeys(set map[string]bool) []string {
	ids := make([]string, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// HoldNext makes the gateway accept the next request from relay (its
// ?relay= parameter) and then hold it without answering, as a gateway that
// approved a payment whose answer never reached the caller. The returned
// channel receives the held request. The request is answered when its
// client goes away, when ReleaseHeld is called, or on Close.
func (g *Gateway) HoldNext(relay string) <-chan Held {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := &hold{relay: relay, held: make(chan Held, 1), release: make(chan struct{})}
	g.hold = h
	return h.held
}

// ReleaseHeld answers a held request and cancels a HoldNext not yet used.
func (g *Gateway) ReleaseHeld() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, h := range []*hold{g.hold, g.holding} {
		if h != nil {
			close(h.release)
		}
	}
	g.hold, g.holding = nil, nil
}

// payload is what the gateway reads from an event's body.
type payload struct {
	Seq        *int   `json:"seq"`
	MerchantID string `json:"merchant_id"`
	// ExpiredEventID is set in the default payload of a compensating
	// event (outbox.Compensation): the id of the event that expired. (The
	// HTTP sink keeps Outbox-* names for itself, so the
	// outbox-compensates header does not reach the gateway.)
	ExpiredEventID string `json:"expired_event_id"`
}

func (g *Gateway) serveEvent(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	if err := g.wait(r.Context()); err != nil {
		return // the client went away
	}
	key := r.Header.Get("Idempotency-Key")
	d := Delivery{
		EventID:       key,
		AggregateType: r.Header.Get("Outbox-Aggregate-Type"),
		AggregateID:   r.Header.Get("Outbox-Aggregate-Id"),
		EventType:     r.Header.Get("Outbox-Event-Type"),
		Relay:         r.URL.Query().Get("relay"),
		At:            time.Now(),
	}
	var p payload
	jsonErr := json.Unmarshal(body, &p)
	// A compensating event (an approval that expired in the gateway's
	// table) is outside the payment's sequence.
	d.Compensates = p.ExpiredEventID

	status, msg, h := g.decide(key, d, p, jsonErr)
	if h != nil {
		select {
		case <-h.release:
		case <-r.Context().Done():
		case <-g.closing:
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"result": msg})
}

// decide records the request and returns the answer, and a hold to wait on
// before answering.
func (g *Gateway) decide(key string, d Delivery, p payload, jsonErr error) (int, string, *hold) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.requests++
	status, msg, h := g.decideLocked(key, d, p, jsonErr)
	g.byStatus[status]++
	return status, msg, h
}

func (g *Gateway) decideLocked(key string, d Delivery, p payload, jsonErr error) (int, string, *hold) {
	switch {
	case g.down:
		if key != "" {
			g.outageHits[key] = true
		}
		g.outageBy[d.Relay]++
		return http.StatusServiceUnavailable, "gateway unavailable (outage)", nil
	case g.cfg.FailRate > 0 && g.rnd.Float64() < g.cfg.FailRate:
		return http.StatusServiceUnavailable, "gateway busy, try again", nil
	case key == "":
		return http.StatusBadRequest, "the Idempotency-Key header is required", nil
	case jsonErr != nil:
		return http.StatusBadRequest, "the body is not JSON: " + jsonErr.Error(), nil
	case g.cfg.PoisonMerchant != "" && p.MerchantID == g.cfg.PoisonMerchant:
		if key != "" {
			g.refused[key] = true
		}
		return http.StatusBadRequest, "merchant " + p.MerchantID + ": invalid business registration", nil
	}
	if _, seen := g.accepted[key]; seen {
		g.duplicates++
		g.dupByEvent[key]++
		return http.StatusOK, "duplicate: already approved under this Idempotency-Key", nil
	}
	d.Seq = -1
	if p.Seq != nil {
		d.Seq = *p.Seq
	}
	agg := d.Aggregate()
	if d.Compensates != "" {
		// Written when its event expired, after the aggregate's steps:
		// outside the payment's sequence.
		g.compByType[d.EventType]++
	} else if last, ok := g.lastSeq[agg]; ok && d.Seq <= last {
		g.violations = append(g.violations, Violation{Aggregate: agg, EventID: key, Seq: d.Seq, After: last})
	} else {
		g.lastSeq[agg] = d.Seq
	}
	g.accepted[key] = d
	g.order = append(g.order, key)
	g.byRelay[d.Relay]++
	var h *hold
	if g.hold != nil && g.hold.relay == d.Relay {
		h = g.hold
		g.hold, g.holding = nil, h
		h.held <- Held{EventID: key, AggregateType: d.AggregateType, AggregateID: d.AggregateID, EventType: d.EventType, Relay: d.Relay}
	}
	return http.StatusOK, "approved", h
}

// wait simulates the gateway's processing time.
func (g *Gateway) wait(ctx context.Context) error {
	g.mu.Lock()
	if g.latency <= 0 {
		g.mu.Unlock()
		return nil
	}
	d := time.Duration((0.5 + g.rnd.Float64()) * float64(g.latency))
	g.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-g.closing:
		return errors.New("gateway closing")
	}
}

// GatewayReport is a snapshot of what the gateway saw.
type GatewayReport struct {
	Requests   int
	ByStatus   map[int]int
	Accepted   map[string]Delivery // by event id: the first acceptance
	Order      []string            // event ids in the order first accepted
	Duplicates int                 // requests repeating an accepted Idempotency-Key
	DupByEvent map[string]int
	Violations []Violation
	ByRelay    map[string]int // first acceptances by relay
	// Compensations counts first acceptances of compensating events by
	// event type (e.g. ApprovalExpired).
	Compensations map[string]int
}

// Report returns a copy of what the gateway has seen so far.
func (g *Gateway) Report() GatewayReport {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := GatewayReport{
		Requests:      g.requests,
		ByStatus:      make(map[int]int, len(g.byStatus)),
		Accepted:      make(map[string]Delivery, len(g.accepted)),
		Order:         append([]string(nil), g.order...),
		Duplicates:    g.duplicates,
		DupByEvent:    make(map[string]int, len(g.dupByEvent)),
		Violations:    append([]Violation(nil), g.violations...),
		ByRelay:       make(map[string]int, len(g.byRelay)),
		Compensations: make(map[string]int, len(g.compByType)),
	}
	for k, v := range g.compByType {
		r.Compensations[k] = v
	}
	for k, v := range g.byStatus {
		r.ByStatus[k] = v
	}
	for k, v := range g.accepted {
		r.Accepted[k] = v
	}
	for k, v := range g.dupByEvent {
		r.DupByEvent[k] = v
	}
	for k, v := range g.byRelay {
		r.ByRelay[k] = v
	}
	return r
}

// Counts returns the number of events accepted and the duplicates, cheaply.
func (g *Gateway) Counts() (accepted, duplicates int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.accepted), g.duplicates
}
