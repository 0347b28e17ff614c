package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
)

// pgOutbox is a migrated PostgreSQL outbox on a table of its own, dropped
// at the end of the test (also when it fails).
type pgOutbox struct {
	pool  *pgxpool.Pool
	store *postgres.Store
}

func newPGOutbox(t *testing.T) *pgOutbox {
	t.Helper()
	pool, s := pgtest.Outbox(t, "brk")
	return &pgOutbox{pool: pool, store: s}
}

// seqEvent is event number seq of aggregate aggType/agg.
func seqEvent(aggType, agg string, seq int, ttl time.Duration) outbox.Event {
	return outbox.Event{AggregateType: aggType, AggregateID: agg, EventType: "ApprovalRequested", TTL: ttl,
		Payload: []byte(fmt.Sprintf(`{"agg":%q,"seq":%d}`, aggType+"/"+agg, seq))}
}

func (o *pgOutbox) enqueue(t testing.TB, events ...outbox.Event) {
	t.Helper()
	ctx := context.Background()
	for len(events) > 0 {
		n := min(len(events), 500)
		tx, err := o.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.store.Enqueue(ctx, tx, events[:n]...); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		events = events[n:]
	}
}

// counts returns the number of events by status.
func (o *pgOutbox) counts(t testing.TB) map[outbox.Status]int64 {
	t.Helper()
	st, err := o.store.Stats(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	return st.Counts
}

// scalar runs a query of one integer on the outbox table ({t}).
func (o *pgOutbox) scalar(t testing.TB, query string) int64 {
	t.Helper()
	var n int64
	q := fmt.Sprintf(query, `"`+o.store.Table()+`"`)
	if err := o.pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// routeLog returns the route's audit rows, oldest first.
func (o *pgOutbox) routeLog(t testing.TB, route string) []store.RouteLogEntry {
	t.Helper()
	log, err := o.store.RouteLog(context.Background(), route, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(log)-1; i < j; i, j = i+1, j-1 {
		log[i], log[j] = log[j], log[i]
	}
	return log
}

// gateway is an HTTP destination that can be taken down (503), that
// refuses poison events (400), and that checks the order per aggregate
// of what it accepts.
type gateway struct {
	srv    *httptest.Server
	down   atomic.Bool
	poison sync.Map // "type/agg" payload agg -> true: answered 400

	requests     atomic.Int64 // every request
	downRequests atomic.Int64 // requests answered 503

	mu         sync.Mutex
	lastSeq    map[string]int  // aggregate -> last seq accepted the first time
	seen       map[string]bool // event id -> accepted once
	violations int             // a first acceptance out of order
	accepted   int             // first acceptances
	latencies  []time.Duration // acceptance time minus the payload's "at" (enqueue time), when it has one
	times      []time.Time     // when each request arrived
}

func newGateway(t *testing.T) *gateway {
	g := &gateway{lastSeq: map[string]int{}, seen: map[string]bool{}}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gateway) serve(w http.ResponseWriter, r *http.Request) {
	g.requests.Add(1)
	now := time.Now()
	g.mu.Lock()
	g.times = append(g.times, now)
	g.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	if g.down.Load() {
		g.downRequests.Add(1)
		http.Error(w, "gateway down for maintenance", http.StatusServiceUnavailable)
		return
	}
	var p struct {
		Agg string `json:"agg"`
		Seq int    `json:"seq"`
		At  int64  `json:"at"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	if _, bad := g.poison.Load(p.Agg); bad {
		http.Error(w, "invalid merchant id", http.StatusBadRequest)
		return
	}
	id := r.Header.Get("Outbox-Event-Id")
	g.mu.Lock()
	if !g.seen[id] {
		g.seen[id] = true
		g.accepted++
		if p.Seq != g.lastSeq[p.Agg]+1 {
			g.violations++
		}
		g.lastSeq[p.Agg] = p.Seq
		if p.At > 0 {
			g.latencies = append(g.latencies, now.Sub(time.Unix(0, p.At)))
		}
	}
	g.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// figures returns the first acceptances and the order violations.
func (g *gateway) figures() (accepted, violations int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.accepted, g.violations
}

// requestsBetween counts the requests that arrived in [from, to].
func (g *gateway) requestsBetween(from, to time.Time) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, at := range g.times {
		if !at.Before(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// waitUntil polls cond every 50ms until it holds, failing the test after timeout.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}
