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

// refused starts `outbox relay --source binlog` and returns its log once
// it has exited; it fails the test if the relay exits 0 or keeps running.
func refused(t *testing.T, h *sourceHarness) string {
	t.Helper()
	p := e2etest.StartCLI(t, "relay", "--db", h.srv.DSN(), "--table", h.table, "--sink", "discard://", "--source", "binlog")
	eventually(t, 2*time.Minute, "the relay to exit", p.Exited, p.Log)
	if p.Err() == nil {
		t.Fatalf("the relay exited 0:\n%s", p.Log())
	}
	return p.Log()
}

func TestRelaySourceBinlogRefusesServerWithoutBinaryLog(t *testing.T) {
	h := newSourceHarness(t, "binlog_nolog_events", "--server-id=44")
	log := refused(t, h)
	if !strings.Contains(log, "the binary log is off: start the server with --log-bin") {
		t.Errorf("the relay's refusal does not say how to turn the binary log on:\n%s", log)
	}
}

// TestRelaySourceBinlogOnServer runs, on one private server with the
// binary log on, the refusal of STATEMENT format and the fallback from a
// purged position.
func TestRelaySourceBinlogOnServer(t *testing.T) {
	h := newSourceHarness(t, "binlog_purge_events")
	t.Run("RefusesStatementFormat", func(t *testing.T) {
		h.srv.Exec(t, "SET GLOBAL binlog_format = 'STATEMENT'")
		log := refused(t, h)
		h.srv.Exec(t, "SET GLOBAL binlog_format = 'ROW'")
		if !strings.Contains(log, "binlog_format is STATEMENT: set binlog_format=ROW") {
			t.Errorf("the relay's refusal does not name binlog_format=ROW:\n%s", log)
		}
		if strings.Contains(log, "--log-bin") {
			t.Errorf("the refusal names --log-bin, which is on:\n%s", log)
		}
	})
	t.Run("FallsBackToPollingWhenPositionPurged", func(t *testing.T) { fallsBackWhenPurged(t, h) })
}

// A relay whose saved position was purged while it was down logs an
// ERROR that says so, counts it, delivers every event committed
// meanwhile by polling the table, and then reads the binary log again.
func fallsBackWhenPurged(t *testing.T, h *sourceHarness) {
	rec := newReceiver()
	sink := httptest.NewServer(rec)
	t.Cleanup(sink.Close)
	relayArgs := func(admin string) []string {
		return []string{"relay", "--db", h.srv.DSN(), "--table", h.table, "--sink", sink.URL,
			"--source", "binlog", "--stream-lease", "1s", "--safety-poll", "1s", "--poll-interval", "100ms",
			"--sweep-interval", "200ms", "--relay-id", "binlog-purge-relay", "--admin", admin}
	}
	ctx := testContext(t, 5*time.Minute)
	relay := e2etest.StartCLI(t, relayArgs(freeAddr(t))...)
	eventually(t, 2*time.Minute, "the relay to read the binary log", func() bool {
		return strings.Contains(relay.Log(), "caught up with the table")
	}, relay.Log)
	before, err := binlog.CurrentPosition(ctx, h.db)
	if err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, ctx, 0, 100, 10)
	eventually(t, 2*time.Minute, "the first 100 events PROCESSED", func() bool { return h.count(t, outbox.StatusProcessed) == 100 }, relay.Log)
	var saved binlog.SavedPosition
	eventually(t, time.Minute, "the position saved past them", func() bool {
		saved, err = binlog.ReadSaved(ctx, h.db, h.table)
		return err == nil && saved.Exists && (saved.Position.File != before.File || saved.Position.Offset > before.Offset)
	}, func() string { return fmt.Sprintf("saved %+v, before the events %s", saved, before) })
	relay.Kill()

	for i := 1; i <= 3; i++ {
		h.enqueue(t, ctx, i*100, 100, 10)
	}
	h.srv.Exec(t, "FLUSH BINARY LOGS")
	now, err := binlog.CurrentPosition(ctx, h.db)
	if err != nil {
		t.Fatal(err)
	}
	// A server does not purge a file a dump thread still reads.
	eventually(t, time.Minute, "the killed relay's Binlog Dump thread to end", func() bool { return h.binlogDumpThreads(t) == 0 })
	// MariaDB keeps a file until its binlog checkpoint has moved on,
	// which happens a moment after the rotation.
	var oldest string
	eventually(t, time.Minute, "PURGE BINARY LOGS to remove the files before "+now.File, func() bool {
		h.srv.Exec(t, "PURGE BINARY LOGS TO '"+now.File+"'")
		if err := h.db.QueryRowContext(ctx, "SHOW BINARY LOGS").Scan(&oldest, new(any)); err != nil {
			t.Fatal(err)
		}
		return oldest == now.File
	}, func() string { return "the oldest file is " + oldest })

	admin := freeAddr(t)
	relay = e2etest.StartCLI(t, relayArgs(admin)...)
	purged := regexp.MustCompile(`(?m)^outbox_cdc_binlog_position_purged_total\{stream="` + h.table + `_binlog"\} ([0-9.e+]+)$`)
	eventually(t, 2*time.Minute, "the purge counted on /metrics", func() bool { return metric(admin, purged) == 1 }, relay.Log)
	eventually(t, 2*time.Minute, "the 400 events PROCESSED", func() bool { return h.count(t, outbox.StatusProcessed) == 400 }, relay.Log)
	errLine := regexp.MustCompile(`(?m)^.*level=ERROR.*saved binary log position is no longer on the server.*falling back to polling.*$`)
	if line := errLine.FindString(relay.Log()); line == "" {
		t.Errorf("no ERROR saying the position was purged and the relay falls back to polling:\n%s", relay.Log())
	} else if !strings.Contains(line, saved.Position.File) {
		t.Errorf("the ERROR does not name the purged position %s: %s", saved.Position, line)
	}

	read := regexp.MustCompile(`(?m)^outbox_cdc_binlog_events_read_total\{stream="` + h.table + `_binlog"\} ([0-9.e+]+)$`)
	h.enqueue(t, ctx, 400, 50, 10)
	eventually(t, 2*time.Minute, "the events committed after the fallback read from the binary log", func() bool {
		return metric(admin, read) >= 50 && h.count(t, outbox.StatusProcessed) == 450
	}, relay.Log)
	relay.Kill()
	if distinct, _, violations := rec.counts(); distinct != 450 || violations != 0 {
		t.Errorf("%d distinct events delivered with %d order violations, want 450 and 0", distinct, violations)
	}
	t.Logf("fell back from %s: %s", saved.Position, fmt.Sprint(errLine.FindString(relay.Log())))
}
