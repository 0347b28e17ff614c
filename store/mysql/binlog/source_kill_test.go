package binlog_test

import (
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/store/mysql/binlog"
)

// The real CLI with --source binlog on a private MariaDB: 5,000 events in
// 10 transactions over 50 aggregates, FLUSH BINARY LOGS between the fifth
// and the sixth, the relay SIGKILLed mid-drain and started again. Every
// event is delivered and PROCESSED, in order per aggregate, with no more
// repeats than the one batch in flight at the kill; a Binlog Dump thread
// serves the relay while it runs, and the restarted relay reads events
// from the binary log.
func TestRelaySourceBinlogSurvivesKillAndRotation(t *testing.T) {
	h := newSourceHarness(t, "binlog_kill_events")
	rec := newReceiver()
	sink := httptest.NewServer(rec)
	t.Cleanup(sink.Close)
	const total, txs, aggs, batch = 5000, 10, 50, 100
	// A rate limit stretches the drain so that the kill lands mid-drain.
	sinkURL := sink.URL + "/events?rate=1000/s&burst=100"
	relayArgs := func(admin string) []string {
		return []string{"relay", "--db", h.srv.DSN(), "--table", h.table, "--sink", sinkURL,
			"--source", "binlog", "--stream-lease", "2s", "--safety-poll", "2s", "--poll-interval", "100ms",
			"--batch", fmt.Sprint(batch), "--in-flight", "1", "--lease", "5s", "--sweep-interval", "200ms",
			"--backoff-min", "50ms", "--relay-id", "binlog-kill-relay", "--admin", admin}
	}
	relay := e2etest.StartCLI(t, relayArgs(freeAddr(t))...)
	eventually(t, 2*time.Minute, "the relay to read the binary log", func() bool {
		return strings.Contains(relay.Log(), "reading the binary log") && strings.Contains(relay.Log(), "caught up with the table")
	}, relay.Log)

	ctx := testContext(t, 5*time.Minute)
	startPos, err := binlog.CurrentPosition(ctx, h.db)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < txs; i++ {
		if i == txs/2 {
			h.srv.Exec(t, "FLUSH BINARY LOGS")
		}
		h.enqueue(t, ctx, i*total/txs, total/txs, aggs)
	}
	eventually(t, time.Minute, "a Binlog Dump thread serving the relay", func() bool { return h.binlogDumpThreads(t) > 0 })

	eventually(t, 2*time.Minute, "a fifth of the events delivered", func() bool {
		d, _, _ := rec.counts()
		return d >= total/5
	}, relay.Log)
	relay.Kill()
	if d, _, _ := rec.counts(); d >= total {
		t.Fatalf("all %d events were delivered before the kill; the kill did not land mid-drain", d)
	}
	eventually(t, time.Minute, "the killed relay's Binlog Dump thread to end", func() bool { return h.binlogDumpThreads(t) == 0 })

	admin := freeAddr(t)
	relay = e2etest.StartCLI(t, relayArgs(admin)...)
	eventually(t, 3*time.Minute, "every event PROCESSED", func() bool { return h.count(t, outbox.StatusProcessed) == total }, relay.Log)
	if n := h.binlogDumpThreads(t); n != 1 {
		t.Errorf("%d Binlog Dump threads while the restarted relay runs, want 1", n)
	}
	read := regexp.MustCompile(`(?m)^outbox_cdc_binlog_events_read_total\{stream="` + h.table + `_binlog"\} ([0-9.e+]+)$`)
	if n := metric(admin, read); n <= 0 {
		t.Errorf("outbox_cdc_binlog_events_read_total of the restarted relay is %v, want the events it read from the binary log", n)
	}
	saved, err := binlog.ReadSaved(ctx, h.db, h.table)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the saved position to pass the rotation", func() bool {
		saved, err = binlog.ReadSaved(ctx, h.db, h.table)
		return err == nil && saved.Exists && saved.Position.File != startPos.File
	}, func() string { return fmt.Sprintf("saved %+v, started in %s", saved, startPos.File) })
	relay.Kill()

	distinct, deliveries, violations := rec.counts()
	if distinct != total {
		t.Errorf("%d distinct events delivered, want %d", distinct, total)
	}
	if violations != 0 {
		t.Errorf("%d order violations per aggregate, want 0", violations)
	}
	if dup := deliveries - distinct; dup > batch {
		t.Errorf("%d deliveries were repeats, more than the one batch of %d in flight at the kill", dup, batch)
	}
	t.Logf("delivered %d of %d, %d repeats after one SIGKILL, saved position %s", distinct, total, deliveries-distinct, saved.Position)
}
