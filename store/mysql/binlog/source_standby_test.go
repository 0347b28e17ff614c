package binlog_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/e2etest"
)

// Two relays (the real CLI) with --source binlog on one outbox: the one
// holding the stream lease is SIGKILLed mid-stream, and the stand-by takes
// the lease within it, reads the binary log from the saved position and
// delivers the rest: no event lost, order per aggregate kept, and no more
// repeats than the batches in flight at the kill.
func TestBinlogKilledStreamingRelayStandbyTakesOver(t *testing.T) {
	h := newSourceHarness(t, "binlog_standby_events")
	rec := newReceiver()
	sink := httptest.NewServer(rec)
	t.Cleanup(sink.Close)
	// A rate limit stretches the stream so that the kill lands mid-stream.
	sinkURL := sink.URL + "/events?rate=400/s&burst=20"
	const total, aggs, batch, inFlight = 600, 20, 20, 2
	relayArgs := func(id string) []string {
		return []string{"relay", "--db", h.srv.DSN(), "--table", h.table, "--sink", sinkURL,
			"--source", "binlog", "--stream-lease", "1s", "--safety-poll", "2s", "--poll-interval", "100ms",
			"--batch", fmt.Sprint(batch), "--in-flight", fmt.Sprint(inFlight),
			"--lease", "3s", "--sweep-interval", "200ms", "--backoff-min", "50ms", "--relay-id", id}
	}
	a := e2etest.StartCLI(t, relayArgs("binlog-standby-a")...)
	eventually(t, 2*time.Minute, "relay a to take the stream lease", func() bool { return h.holder(t) == "binlog-standby-a" }, a.Log)
	b := e2etest.StartCLI(t, relayArgs("binlog-standby-b")...)
	eventually(t, time.Minute, "relay b to stand by", func() bool { return strings.Contains(b.Log(), "standing by") }, b.Log)

	ctx := testContext(t, 3*time.Minute)
	for i := 0; i < total/100; i++ {
		h.enqueue(t, ctx, i*100, 100, aggs)
	}
	eventually(t, time.Minute, "deliveries to start", func() bool { _, n, _ := rec.counts(); return n >= total/4 }, a.Log)
	a.Kill()
	killed := time.Now()
	if d, _, _ := rec.counts(); d >= total {
		t.Fatalf("all %d events were delivered before the kill; the kill did not land mid-stream", d)
	}
	eventually(t, 30*time.Second, "relay b to take over the stream", func() bool { return h.holder(t) == "binlog-standby-b" }, b.Log)
	t.Logf("relay b took over %s after relay a was killed (stream lease 1s)", time.Since(killed).Round(time.Millisecond))
	eventually(t, 2*time.Minute, "every event PROCESSED", func() bool { return h.count(t, outbox.StatusProcessed) == total }, b.Log)
	if !strings.Contains(b.Log(), "reading the binary log") {
		t.Errorf("relay b never read the binary log:\n%s", b.Log())
	}
	if n := h.binlogDumpThreads(t); n != 1 {
		t.Errorf("%d Binlog Dump threads while relay b streams, want 1", n)
	}
	b.Kill()

	distinct, deliveries, violations := rec.counts()
	if distinct != total {
		t.Errorf("%d distinct events delivered, want %d: events were lost", distinct, total)
	}
	if violations != 0 {
		t.Errorf("%d order violations per aggregate, want 0", violations)
	}
	if dup, bound := deliveries-distinct, batch*inFlight; dup > bound {
		t.Errorf("%d deliveries were repeats, more than the %d in flight at the kill", dup, bound)
	}
	t.Logf("delivered %d events, %d repeats after one SIGKILL", distinct, deliveries-distinct)
}
