package cdc_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox/internal/e2etest"
)

// The CLI around --source logical: /metrics exports the slot's lag,
// `outbox status` shows it (text and JSON), and `outbox migrate --down`
// drops the slot and the publication with the tables.
func TestCLISlotLagStatusAndMigrateDown(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := ln.Addr().String()
	ln.Close()
	relay := e2etest.StartCLI(t, "relay", "--db", h.dsn, "--table", h.table, "--sink", "discard://",
		"--source", "logical", "--slot", h.slot, "--publication", h.pub, "--admin", admin)
	eventually(t, 2*time.Minute, "the relay to stream", func() bool {
		return strings.Contains(relay.Log(), "streaming from the logical replication slot")
	}, relay.Log)
	h.enqueue(t, "a", 3)

	lagLine := regexp.MustCompile(`(?m)^outbox_cdc_slot_lag_bytes\{slot="` + h.slot + `"\} ([0-9.e+]+)$`)
	recreationsLine := regexp.MustCompile(`(?m)^outbox_cdc_slot_recreations_total\{slot="` + h.slot + `"\} 0$`)
	eventually(t, 2*time.Minute, "outbox_cdc_slot_lag_bytes and outbox_cdc_slot_recreations_total on /metrics", func() bool {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return lagLine.Match(body) && recreationsLine.Match(body)
	})

	// A status taken while the stream runs shows the lag and "streaming".
	// The relay restarts its stream when a lease renewal fails (on a loaded
	// machine), and a status taken then rightly says "idle", so wait for one
	// taken while it streams; the relay's log says why it did not.
	streaming := regexp.MustCompile(`cdc slot lag\s+\d+ bytes \(slot ` + regexp.QuoteMeta(h.slot) + `, streaming\)`)
	var text, jsonOut string
	eventually(t, 2*time.Minute, "outbox status to show the slot's lag while it streams", func() bool {
		text = e2etest.RunCLI(t, "", "status", "--db", h.dsn, "--table", h.table, "--slot", h.slot)
		if !streaming.MatchString(text) {
			return false
		}
		jsonOut = e2etest.RunCLI(t, "", "status", "--json", "--db", h.dsn, "--table", h.table, "--slot", h.slot)
		var js map[string]any
		if err := json.Unmarshal([]byte(jsonOut), &js); err != nil {
			t.Fatalf("status --json: %v\n%s", err, jsonOut)
		}
		if js["cdc_slot"] != h.slot {
			t.Fatalf("status --json: cdc_slot %v, want %s", js["cdc_slot"], h.slot)
		}
		if _, ok := js["cdc_slot_lag_bytes"].(float64); !ok {
			t.Fatalf("status --json has no cdc_slot_lag_bytes: %v", js)
		}
		return js["cdc_slot_active"] == true
	}, func() string {
		return "last status:\n" + text + "\nlast status --json: " + jsonOut + "\nrelay log:\n" + relay.Log()
	})

	relay.Kill()
	// The killed relay's walsender ends with its connection.
	eventually(t, 2*time.Minute, "the slot to be released", func() bool {
		var active bool
		err := h.pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, h.slot).Scan(&active)
		return err == nil && !active
	})
	e2etest.RunCLI(t, "", "migrate", "--down", "--yes", "--db", h.dsn, "--table", h.table, "--slot", h.slot, "--publication", h.pub)
	var slots, pubs int
	if err := h.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1),
		(SELECT count(*) FROM pg_publication WHERE pubname = $2)`, h.slot, h.pub).Scan(&slots, &pubs); err != nil {
		t.Fatal(err)
	}
	if slots != 0 || pubs != 0 {
		t.Errorf("after migrate --down: %d slots and %d publications named %s / %s, want none", slots, pubs, h.slot, h.pub)
	}
}
