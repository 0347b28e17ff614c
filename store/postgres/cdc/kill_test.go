package cdc_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/e2etest"
)

// received counts the deliveries per event id an HTTP endpoint saw.
type received struct {
	mu    sync.Mutex
	byID  map[string]int
	total int
}

func (r *received) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	id := req.Header.Get("Outbox-Event-Id")
	r.mu.Lock()
	r.byID[id]++
	r.total++
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *received) counts() (distinct, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID), r.total
}

// holder returns the relay id in the stream lease, or "".
func (h *harness) holder(t *testing.T) string {
	var who string
	err := h.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT holder FROM %q WHERE slot = $1 AND expires_at > now()`, h.table+"_cdc_lease"), h.slot).Scan(&who)
	if err != nil {
		return ""
	}
	return who
}

// The streaming relay (the real CLI) is SIGKILLed mid-stream: the standby
// takes over within the stream lease and delivers the rest; then the
// killed relay comes back as the standby, the second streaming relay is
// killed too, and the first takes over again. No event is lost, and the
// events delivered twice are bounded by what was in flight.
func TestKilledStreamingRelayStandbyTakesOver(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	rec := &received{byID: map[string]int{}}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	// A rate limit stretches the stream so that each kill lands mid-stream.
	sinkURL := srv.URL + "/events?rate=400/s&burst=20"
	const batch, inFlight = 20, 2
	relayArgs := func(id string) []string {
		return []string{"relay", "--db", h.dsn, "--table", h.table, "--sink", sinkURL,
			"--source", "logical", "--slot", h.slot, "--publication", h.pub,
			"--stream-lease", "1s", "--safety-poll", "1s", "--poll-interval", "100ms",
			"--batch", fmt.Sprint(batch), "--in-flight", fmt.Sprint(inFlight),
			"--lease", "3s", "--sweep-interval", "200ms", "--backoff-min", "50ms", "--relay-id", id}
	}
	// The slot and publication are made by the first relay; a first
	// relay A streams, B stands by.
	a := e2etest.StartCLI(t, relayArgs("relay-a")...)
	eventually(t, 30*time.Second, "relay-a to take the stream lease", func() bool { return h.holder(t) == "relay-a" })
	b := e2etest.StartCLI(t, relayArgs("relay-b")...)
	eventually(t, 30*time.Second, "relay-b to stand by", func() bool { return strings.Contains(b.Log(), "standing by") })

	const perRound = 1000
	produce := func() {
		for i := 0; i < perRound/10; i++ {
			h.enqueue(t, fmt.Sprintf("agg-%d", i%25), 10)
		}
	}
	kill := func(p *e2etest.Process, name, next string, delivered int) {
		t.Helper()
		eventually(t, 60*time.Second, "deliveries to start", func() bool { _, n := rec.counts(); return n >= delivered })
		p.Kill()
		killed := time.Now()
		eventually(t, 30*time.Second, next+" to take over the stream", func() bool { return h.holder(t) == next })
		t.Logf("%s took over %s after %s was killed (stream lease 1s)", next, time.Since(killed).Round(time.Millisecond), name)
	}

	produce()
	kill(a, "relay-a", "relay-b", perRound/4)
	if d, _ := rec.counts(); d >= perRound {
		t.Fatalf("all %d events were delivered before the kill; the kill did not land mid-stream", d)
	}
	a = e2etest.StartCLI(t, relayArgs("relay-a")...)
	eventually(t, 2*time.Minute, "the first round delivered", func() bool { return h.count(t, outbox.StatusProcessed) == perRound })

	produce()
	kill(b, "relay-b", "relay-a", perRound+perRound/4)
	eventually(t, 2*time.Minute, "every event PROCESSED", func() bool { return h.count(t, outbox.StatusProcessed) == 2*perRound })
	a.Kill()

	distinct, total := rec.counts()
	if distinct != 2*perRound {
		t.Errorf("%d distinct events delivered, want %d: events were lost", distinct, 2*perRound)
	}
	// Each kill can leave up to the batches in flight delivered and not
	// recorded; the takeover sends those again.
	if dup, bound := total-distinct, 2*batch*inFlight; dup > bound {
		t.Errorf("%d deliveries were repeats, more than the %d in flight at the two kills", dup, bound)
	}
	if !strings.Contains(a.Log(), "streaming from the logical replication slot") {
		t.Errorf("the restarted relay-a never streamed:\n%s", a.Log())
	}
	t.Logf("delivered %d events, %d repeats after two SIGKILLs", distinct, total-distinct)
}
