package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/wait"
)

// The scale test's gateway tells relays apart by the path of the sink URL:
// each relay is started with --sink <gateway>/approve/<its relay id>. The
// HTTP sink sends no header naming the relay, so the path is the one thing
// per relay the gateway can see.
const scalePath = "/approve/"

// span is one request the gateway answered with 2xx: which relay sent it,
// for which aggregate, and when it arrived and when its response was
// flushed.
type span struct {
	relay    string
	agg, seq int
	from, to time.Time
	repeat   bool // the event had reached the gateway before
}

// stall is the request a kill point holds: the relay that sent it is
// SIGKILLed before the request is answered, so its event stays PROCESSING
// under that relay's lease until a sweeper reaps it.
type stall struct {
	relay, eventID string
	release        chan struct{}
}

// scaleGateway answers every request 200 and records, per request, the
// relay, the aggregate and the times. It can hold the first request from a
// live relay at or after a receive count (a kill point), and can hold all
// requests until a number of relays have sent one (so that the work is
// shared whatever the start-up order).
type scaleGateway struct {
	mu       sync.Mutex
	n        int
	received []receipt
	spans    []span
	by       map[string][]string // relay -> event ids it delivered
	seen     map[string]bool     // relays that sent a request
	events   map[string]bool     // event ids that reached the gateway
	dead     map[string]bool     // relays the test killed
	killNext int                 // hold the first request from a live relay at n >= killNext (0: none)
	stalls   chan stall
	gateAt   int           // hold requests until this many relays have sent one (0: none)
	gate     chan struct{} // closed once gateAt relays were seen
	quit     chan struct{} // closed when the test ends: nothing stays held
}

func newScaleGateway(gateAt int) *scaleGateway {
	g := &scaleGateway{by: map[string][]string{}, seen: map[string]bool{}, events: map[string]bool{}, dead: map[string]bool{},
		stalls: make(chan stall), gateAt: gateAt, gate: make(chan struct{}), quit: make(chan struct{})}
	if gateAt == 0 {
		close(g.gate)
	}
	return g
}

func (g *scaleGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	from := time.Now()
	relay := strings.TrimPrefix(r.URL.Path, scalePath)
	id := r.Header.Get("Idempotency-Key")
	body, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	g.n++
	if !g.seen[relay] {
		g.seen[relay] = true
		if g.gateAt > 0 && len(g.seen) == g.gateAt {
			close(g.gate)
		}
	}
	kill := g.killNext > 0 && g.n >= g.killNext && !g.dead[relay]
	if kill {
		g.killNext = 0
	}
	g.mu.Unlock()
	if kill {
		s := stall{relay: relay, eventID: id, release: make(chan struct{})}
		select {
		case g.stalls <- s:
		case <-g.quit:
			return
		}
		select { // the relay is dead when this returns: nobody reads the answer
		case <-s.release:
		case <-g.quit:
		}
		return
	}
	select {
	case <-g.gate:
	case <-g.quit:
		return
	}
	var p struct{ Agg, Seq int }
	_ = json.Unmarshal(body, &p)
	g.mu.Lock()
	// Recorded before the answer: the relay sends the aggregate's next
	// event only after it, so the record order is the delivery order.
	g.received = append(g.received, receipt{id, p.Agg, p.Seq})
	g.by[relay] = append(g.by[relay], id)
	i := len(g.spans)
	g.spans = append(g.spans, span{relay: relay, agg: p.Agg, seq: p.Seq, from: from, repeat: g.events[id]})
	g.events[id] = true
	g.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	g.mu.Lock()
	g.spans[i].to = time.Now()
	g.mu.Unlock()
}

// arm makes the first request from a live relay at receive count n or
// later a kill point.
func (g *scaleGateway) arm(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.killNext = n
}

func (g *scaleGateway) markDead(relay string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dead[relay] = true
}

// count is the number of requests received, answered or not.
func (g *scaleGateway) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// distinct is the number of distinct events answered 2xx.
func (g *scaleGateway) distinct() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range g.received {
		seen[r.eventID] = true
	}
	return len(seen)
}

func (g *scaleGateway) snapshot() ([]receipt, []span, map[string][]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	by := map[string][]string{}
	for k, v := range g.by {
		by[k] = append([]string(nil), v...)
	}
	return append([]receipt(nil), g.received...), append([]span(nil), g.spans...), by
}

// checkNoOverlap fails the test if two relays had first deliveries of
// one aggregate at the gateway at the same time, or of one lane (laneOf
// maps an aggregate to its lane): a relay delivers only from the lanes it
// leases, and gives a lane up (or lets its lease end) only after the
// outcomes of its batches from it are recorded, which is after their
// answers were flushed. A repeat is left out: a relay whose lease ended
// while it was still sending (descheduled on a loaded machine, say) can
// repeat an event the next holder already sent, and that repeat may
// overlap the next holder's requests; at least once allows it, and the
// count of duplicates bounds it.
func checkNoOverlap(t *testing.T, spans []span, laneOf map[int]int) {
	t.Helper()
	byAgg, byLane := map[int][]span{}, map[int][]span{}
	for _, s := range spans {
		if s.repeat {
			continue
		}
		byAgg[s.agg] = append(byAgg[s.agg], s)
		lane, ok := laneOf[s.agg]
		if !ok {
			t.Fatalf("aggregate tx-%d has no lane in the aggregates table", s.agg)
		}
		byLane[lane] = append(byLane[lane], s)
	}
	bad := overlaps(t, byAgg, "aggregate tx-%d") + overlaps(t, byLane, "lane %d")
	if bad > 0 {
		t.Fatalf("%d overlapping pairs of requests of one aggregate or one lane from different relays", bad)
	}
}

// overlaps reports, per key, the pairs of spans from different relays
// that were at the gateway at the same time, and counts them.
func overlaps(t *testing.T, per map[int][]span, what string) int {
	t.Helper()
	bad := 0
	for key, ss := range per {
		sort.Slice(ss, func(i, j int) bool { return ss[i].from.Before(ss[j].from) })
		for i := range ss {
			for j := i + 1; j < len(ss) && ss[j].from.Before(ss[i].to); j++ {
				if ss[i].relay == ss[j].relay {
					continue
				}
				if bad++; bad <= 5 {
					t.Errorf(what+": %s (tx-%d seq %d, %s..%s) and %s (tx-%d seq %d, from %s) overlap at the gateway",
						key, ss[i].relay, ss[i].agg, ss[i].seq, ss[i].from.Format("15:04:05.000000"), ss[i].to.Format("15:04:05.000000"),
						ss[j].relay, ss[j].agg, ss[j].seq, ss[j].from.Format("15:04:05.000000"))
				}
			}
		}
	}
	return bad
}

// lanesOf reads the lane of each aggregate tx-N of the table from its
// aggregates table.
func lanesOf(t *testing.T, bc backendCase, dsn, table string) map[int]int {
	t.Helper()
	db := openSQL(t, bc.name, dsn)
	rows, err := db.QueryContext(context.Background(), "SELECT aggregate_id, lane FROM "+table+"_aggregates WHERE aggregate_type = 'payment'")
	if err != nil {
		t.Fatalf("lanes of the aggregates: %v", err)
	}
	defer rows.Close()
	out := map[int]int{}
	for rows.Next() {
		var id string
		var lane, n int
		if err := rows.Scan(&id, &lane); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscanf(id, "tx-%d", &n); err != nil {
			t.Fatalf("aggregate id %q: %v", id, err)
		}
		out[n] = lane
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// relayProc is one relay process of the scale test.
type relayProc struct {
	name   string
	cmd    *exec.Cmd
	stderr *testenv.Buffer
	done   chan error
	err    error // set once done has been received
}

// startScaleRelay starts `outbox relay` as relay name, with its own
// --relay-id and its own sink path.
// sinkQuery, when not empty, is the HTTP sink URL's query (its options).
func startScaleRelay(t *testing.T, name, gatewayURL, sinkQuery string, args ...string) *relayProc {
	t.Helper()
	sink := gatewayURL + scalePath + name
	if sinkQuery != "" {
		sink += "?" + sinkQuery
	}
	args = append(append([]string{"relay"}, args...), "--sink", sink, "--relay-id", name)
	cmd, stderr := startRelay(t, args...)
	done := make(chan error, 1)
	p := &relayProc{name: name, cmd: cmd, stderr: stderr, done: done}
	go func() { done <- cmd.Wait() }()
	// Runs before startRelay's cleanup (cleanups run last first), so that
	// Wait has returned before that one reads the process state.
	t.Cleanup(func() {
		if p.done == nil {
			return
		}
		_ = cmd.Process.Kill()
		p.err = <-p.done
	})
	return p
}

// wait waits for the process to exit, at most timeout.
func (p *relayProc) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case p.err = <-p.done:
		p.done = nil
		return p.err
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", p.name, timeout)
		return nil
	}
}

// auditOf returns the audit trail of one event, as `outbox events show --json` prints it.
func auditOf(t *testing.T, dsn, table, id string) []struct {
	RelayID string `json:"relay_id"`
	Outcome string `json:"outcome"`
} {
	t.Helper()
	var shown struct {
		Attempts []struct {
			RelayID string `json:"relay_id"`
			Outcome string `json:"outcome"`
		} `json:"attempts"`
	}
	out := mustCLI(t, "", "events", "show", id, "--json", "--db", dsn, "--table", table)
	if err := json.Unmarshal([]byte(out), &shown); err != nil {
		t.Fatalf("events show --json printed %q: %v", out, err)
	}
	return shown.Attempts
}

// TestScaleEightRelays runs eight relay processes on one outbox: once
// with relays SIGKILLed and added while they drain a backlog, once with no
// kills. Both check, from the gateway: nothing lost, order per aggregate,
// and that no two relays had requests of one aggregate, or of one lane,
// in flight at once;
// and that the work was shared. Duplicates: none without kills, at most
// what the killed relays had in flight with them.
func TestScaleEightRelays(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			if bc.name == "sqlite" {
				t.Skip("SQLite has one writer: docs/OPERATIONS.md runs one relay on it, so eight relay processes on one file are not a supported deployment")
			}
			t.Parallel()
			t.Run("kills and joins during a drain", func(t *testing.T) { scaleKillsAndJoins(t, bc) })
			t.Run("no kills", func(t *testing.T) { scaleNoKills(t, bc) })
		})
	}
}

const scaleRelays, scaleAggs, scaleBatch, scaleInFlight = 8, 50, 10, 2

func scaleRelayArgs(dsn, table, lease string) []string {
	return []string{"--db", dsn, "--table", table, "--batch", fmt.Sprint(scaleBatch), "--in-flight", fmt.Sprint(scaleInFlight),
		"--lease", lease, "--sweep-interval", "200ms", "--poll-interval", "100ms",
		"--backoff-min", "5ms", "--backoff-max", "20ms", "--progress", "0"}
}

func scaleKillsAndJoins(t *testing.T, bc backendCase) {
	dsn, table := bc.dsn(t), newTable()
	const total = 2000
	mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
	mustCLI(t, eventLines(total, scaleAggs, ""), "enqueue", "--db", dsn, "--table", table)
	gw := newScaleGateway(0)
	srv := httptest.NewServer(gw)
	t.Cleanup(func() { close(gw.quit); srv.Close() })
	// A lease short enough that a killed relay's events are taken over
	// within seconds, long enough that a claim (which may take half of it)
	// gets through on a loaded shared MariaDB.
	args := scaleRelayArgs(dsn, table, "10s")

	procs := map[string]*relayProc{}
	// Registered before the relays' own cleanups, so it runs after them,
	// once every relay has exited and its log can be read.
	t.Cleanup(func() {
		if t.Failed() {
			logRelayTails(t, slices.Collect(maps.Values(procs)))
		}
	})
	started := 0
	start := func() {
		started++
		p := startScaleRelay(t, fmt.Sprintf("relay-%d", started), srv.URL, "", args...)
		procs[p.name] = p
	}
	for range scaleRelays {
		start()
	}
	// The schedule, by the gateway's receive count: a kill holds the first
	// request from a live relay at that count, SIGKILLs its relay and starts
	// a replacement; a join starts one more relay.
	type step struct {
		kill bool
		at   int
	}
	steps := []step{{true, total / 10}, {false, total / 5}, {true, total * 3 / 10}, {false, total * 2 / 5}, {true, total / 2}, {true, total * 7 / 10}}
	type killed struct{ relay, eventID string }
	var kills []killed
	for _, s := range steps {
		if !s.kill {
			wait.For(t, 3*time.Minute, fmt.Sprintf("%d requests at the gateway before a join", s.at), func() bool { return gw.count() >= s.at })
			start()
			continue
		}
		gw.arm(s.at)
		var st stall
		select {
		case st = <-gw.stalls:
		case <-time.After(3 * time.Minute):
			t.Fatalf("kill %d: no request reached the kill point at %d (the gateway has %d)", len(kills)+1, s.at, gw.count())
		}
		p := procs[st.relay]
		if p == nil || p.done == nil {
			t.Fatalf("the kill point holds a request of %q, which is not a live relay of the test", st.relay)
		}
		gw.markDead(p.name)
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = p.wait(t, time.Minute)
		close(st.release)
		kills = append(kills, killed{p.name, st.eventID})
		start()
	}

	// A drain that keeps moving passes however slow: on a busy machine
	// the relays' claims on MariaDB can time out again and again, and the
	// drain take many minutes. A drain that stops fails within 2 minutes.
	wait.WhileProgressing(t, 2*time.Minute, 10*time.Minute, fmt.Sprintf("every event of %d at the gateway and PROCESSED", total), func() (bool, int64, error) {
		seen := gw.distinct()
		if seen < total {
			return false, int64(seen), nil
		}
		processed := count(statusJSON(t, dsn, table), "PROCESSED")
		return processed == total, int64(seen + processed), nil
	})
	live := 0
	for _, p := range procs {
		if p.done == nil {
			continue
		}
		live++
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.wait(t, time.Minute); err != nil {
			t.Errorf("%s, stopped with SIGTERM: %v\n%s", p.name, err, p.stderr.String())
		}
	}
	if live != scaleRelays+2 {
		t.Fatalf("%d relays ran at the end, want %d (8, plus 2 that joined)", live, scaleRelays+2)
	}
	if st := statusJSON(t, dsn, table); count(st, "PROCESSING") != 0 || count(st, "PROCESSED") != total {
		t.Fatalf("after the drain: %v", st)
	}
	rs, spans, by := gw.snapshot()
	dups := checkDelivered(t, rs, total, scaleAggs)
	bound := len(kills) * scaleBatch * scaleInFlight
	if dups > bound {
		t.Fatalf("%d duplicates after %d kills with %d batches of %d in flight: more than the work in flight", dups, len(kills), scaleInFlight, scaleBatch)
	}
	checkNoOverlap(t, spans, lanesOf(t, bc, dsn, table))
	if len(by) < 2 {
		t.Fatalf("only %d relay delivered: %v", len(by), keys(by))
	}
	// The kills mattered: each held event was claimed by the killed relay
	// and never answered, so a sweeper reaped it (LEASE_EXPIRED) and
	// another relay delivered it.
	for _, k := range kills {
		var reaped bool
		var deliveredBy []string
		for _, a := range auditOf(t, dsn, table, k.eventID) {
			switch a.Outcome {
			case "LEASE_EXPIRED":
				reaped = true
			case "DELIVERED":
				deliveredBy = append(deliveredBy, a.RelayID)
			}
		}
		if !reaped || len(deliveredBy) == 0 || slices.Contains(deliveredBy, k.relay) {
			t.Fatalf("event %s, held when %s was killed: reaped %v, delivered by %v; want reaped and delivered by another relay",
				k.eventID, k.relay, reaped, deliveredBy)
		}
	}
	t.Logf("%d relays started, %d SIGKILLed, 2 joined; %d delivered: %s; 0 lost, 0 order violations, %d duplicates (bound %d)",
		started, len(kills), len(by), perRelay(by), dups, bound)
}

// idOf returns the event id of aggregate agg's event seq in rs.
func idOf(rs []receipt, agg, seq int) string {
	for _, r := range rs {
		if r.agg == agg && r.seq == seq {
			return r.eventID
		}
	}
	return ""
}

func scaleNoKills(t *testing.T, bc backendCase) {
	dsn, table := bc.dsn(t), newTable()
	const total = 1500
	mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
	mustCLI(t, eventLines(total, scaleAggs, ""), "enqueue", "--db", dsn, "--table", table)
	// Requests wait until two relays have sent one: a relay holds at most
	// batch x in-flight aggregates, fewer than there are, so a second
	// relay always finds work, however late it starts.
	gw := newScaleGateway(2)
	srv := httptest.NewServer(gw)
	t.Cleanup(func() { close(gw.quit); srv.Close() })
	// A lease far above a batch's time: without kills, nothing is taken
	// over, so nothing is delivered twice. The gate holds the first
	// relay's requests until a second relay has started and taken lanes,
	// which on a loaded machine can outlast the HTTP sink's default 10 s
	// timeout, and even a publish budget of 80% of a 1-minute lease (seen
	// at a load of 25 to 40): a request that timed out, or a batch given
	// back, is sent again, and the gateway, which recorded the first
	// request once the gate opened, would count a duplicate. So the
	// requests may wait as long as the test does.
	args := append(scaleRelayArgs(dsn, table, "6m"), "--drain")
	var procs []*relayProc
	t.Cleanup(func() {
		if t.Failed() {
			logRelayTails(t, procs)
		}
	})
	for i := range scaleRelays {
		procs = append(procs, startScaleRelay(t, fmt.Sprintf("relay-%d", i+1), srv.URL, "timeout=5m", args...))
	}
	for _, p := range procs {
		if err := p.wait(t, 5*time.Minute); err != nil {
			t.Fatalf("%s --drain: %v\n%s", p.name, err, p.stderr.String())
		}
	}
	if st := statusJSON(t, dsn, table); count(st, "PROCESSING") != 0 || count(st, "PROCESSED") != total {
		t.Fatalf("after the drain: %v", st)
	}
	rs, spans, by := gw.snapshot()
	if dups := checkDelivered(t, rs, total, scaleAggs); dups != 0 {
		// Say who sent each repeat and what the audit trail recorded, so
		// that a failure explains itself.
		var detail []string
		for _, sp := range spans {
			if sp.repeat && len(detail) < 3 {
				var sent []string
				for relay, ids := range by {
					for _, id := range ids {
						if id == idOf(rs, sp.agg, sp.seq) {
							sent = append(sent, relay)
						}
					}
				}
				detail = append(detail, fmt.Sprintf("tx-%d seq %d sent by %v, audit %+v",
					sp.agg, sp.seq, sent, auditOf(t, dsn, table, idOf(rs, sp.agg, sp.seq))))
			}
		}
		t.Fatalf("%d duplicates with no kill: %s", dups, strings.Join(detail, "; "))
	}
	checkNoOverlap(t, spans, lanesOf(t, bc, dsn, table))
	if len(by) < 2 {
		t.Fatalf("only %d relay delivered: %v", len(by), keys(by))
	}
	// The gateway's view of who delivered is the audit trail's: one event
	// of each relay, recorded DELIVERED under that relay's --relay-id.
	for relay, ids := range by {
		var got []string
		for _, a := range auditOf(t, dsn, table, ids[0]) {
			if a.Outcome == "DELIVERED" {
				got = append(got, a.RelayID)
			}
		}
		if len(got) != 1 || got[0] != relay {
			t.Fatalf("event %s came to the gateway from %s; the audit trail says delivered by %v", ids[0], relay, got)
		}
	}
	t.Logf("%d relays, %d delivered: %s; 0 lost, 0 order violations, 0 duplicates", scaleRelays, len(by), perRelay(by))
}

func keys(m map[string][]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func perRelay(by map[string][]string) string {
	var parts []string
	for _, k := range keys(by) {
		parts = append(parts, fmt.Sprintf("%s %d", k, len(by[k])))
	}
	return strings.Join(parts, ", ")
}

// logRelayTails logs the end of each relay's log, for a failed test: run
// from a cleanup registered before the relays', so that every relay has
// exited by then.
func logRelayTails(t *testing.T, procs []*relayProc) {
	slices.SortFunc(procs, func(a, b *relayProc) int { return strings.Compare(a.name, b.name) })
	for _, p := range procs {
		lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
		t.Logf("%s, the last %d lines of its log:\n%s", p.name, min(len(lines), 20), strings.Join(lines[max(0, len(lines)-20):], "\n"))
	}
}
