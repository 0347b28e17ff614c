package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/sqlite"
)

// deliveredEventIDs enqueues n events, drains them to stdout:// with
// --retention 0 (so that they stay in the hot table), and returns their
// event ids.
func deliveredEventIDs(t *testing.T, dsn, table string, n int) []string {
	t.Helper()
	args := []string{"--db", dsn, "--table", table}
	mustCLI(t, "", append([]string{"migrate"}, args...)...)
	mustCLI(t, eventLines(n, n, ""), append([]string{"enqueue"}, args...)...)
	mustCLI(t, "", append([]string{"relay", "--sink", "stdout://", "--drain", "--retention", "0"}, args...)...)
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(mustCLI(t, "", append([]string{"events", "list", "--json"}, args...)...)), "\n") {
		var r struct {
			EventID string `json:"event_id"`
			Status  string `json:"status"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("events list --json line %q: %v", line, err)
		}
		if r.Status != "PROCESSED" {
			t.Fatalf("event %s is %s after the drain; want PROCESSED", r.EventID, r.Status)
		}
		ids = append(ids, r.EventID)
	}
	if len(ids) != n {
		t.Fatalf("%d events listed; want %d", len(ids), n)
	}
	return ids
}

// TestHistoryCommands: `outbox history move` moves the delivered events,
// `events show` and `status` read the history, `history months` lists
// this month, and a retention keeps a month that has not ended, on every
// backend.
func TestHistoryCommands(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			args := []string{"--db", dsn, "--table", table}
			ids := deliveredEventIDs(t, dsn, table, 2)
			if out := mustCLI(t, "", append([]string{"history", "move", "--older-than", "0"}, args...)...); !strings.Contains(out, "moved 2 events into history") {
				t.Fatalf("history move printed %q; want 2 moved", out)
			}
			show := mustCLI(t, "", append([]string{"events", "show", ids[0]}, args...)...)
			if !strings.Contains(show, "from history") || !strings.Contains(show, "PROCESSED") || !strings.Contains(show, "DELIVERED") {
				t.Fatalf("events show of a moved event:\n%s\nwant it from history, PROCESSED, with its delivery", show)
			}
			var shown map[string]any
			if err := json.Unmarshal([]byte(mustCLI(t, "", append([]string{"events", "show", ids[0], "--json"}, args...)...)), &shown); err != nil || shown["from_history"] != true {
				t.Fatalf("events show --json of a moved event = %v, %v; want from_history", shown, err)
			}
			month := store.MonthStart(time.Now()).Format("2006-01")
			if out := mustCLI(t, "", append([]string{"history", "months"}, args...)...); !strings.Contains(out, month) {
				t.Fatalf("history months printed %q; want %s", out, month)
			}
			if out := mustCLI(t, "", append([]string{"status"}, args...)...); !strings.Contains(out, "history") || !strings.Contains(out, month) {
				t.Fatalf("status printed %q; want the history's month %s", out, month)
			}
			if st := statusJSON(t, dsn, table); st["history"] == nil {
				t.Fatalf("status --json has no history: %v", st)
			}
			out := mustCLI(t, "", append([]string{"history", "retention", "--keep-days", "1"}, args...)...)
			if !strings.Contains(out, "dropped 0 months") {
				t.Fatalf("retention of a day printed %q; want this month kept whole", out)
			}
			if _, errOut, code := cli(t, "", append([]string{"history", "retention", "--keep-days", "0"}, args...)...); code == 0 || !strings.Contains(errOut, "--keep-days") {
				t.Fatalf("retention --keep-days 0: exit %d, %q; want a refusal naming --keep-days", code, errOut)
			}
			mustCLI(t, "", append([]string{"events", "show", ids[1]}, args...)...)
		})
	}
}

// TestHistoryRetentionCommand: on SQLite, an event finished two months
// ago moves into its month, `history retention --dry-run` names that
// month and drops nothing, and the retention drops it whole, logs it and
// keeps this month.
func TestHistoryRetentionCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	dsn, table := "sqlite://"+path, newTable()
	args := []string{"--db", dsn, "--table", table}
	ids := deliveredEventIDs(t, dsn, table, 2)
	db, err := sql.Open(sqlite.DriverName, sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old := store.MonthStart(time.Now()).AddDate(0, -2, 2)
	if _, err := db.ExecContext(context.Background(), `UPDATE "`+table+`" SET processed_at = ? WHERE event_id = ?`,
		old.Format("2006-01-02 15:04:05.000"), ids[0]); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, "", append([]string{"history", "move", "--older-than", "0"}, args...)...)
	out := mustCLI(t, "", append([]string{"history", "retention", "--keep-days", "1", "--dry-run"}, args...)...)
	if !strings.Contains(out, "dry run: 1 months") || !strings.Contains(out, old.Format("2006-01")) {
		t.Fatalf("retention --dry-run printed %q; want the month %s", out, old.Format("2006-01"))
	}
	mustCLI(t, "", append([]string{"events", "show", ids[0]}, args...)...)
	out, errOut, code := cli(t, "", append([]string{"history", "retention", "--keep-days", "1"}, args...)...)
	if code != 0 || !strings.Contains(out, "dropped 1 months (1 events)") || !strings.Contains(errOut, "history retention dropped a month of history") ||
		!strings.Contains(errOut, "month="+old.Format("2006-01")) {
		t.Fatalf("retention: exit %d\nstdout: %s\nstderr: %s\nwant the old month dropped and logged", code, out, errOut)
	}
	if _, errOut, code := cli(t, "", append([]string{"events", "show", ids[0]}, args...)...); code == 0 {
		t.Fatalf("events show of an event of a dropped month succeeded; stderr %q", errOut)
	}
	if show := mustCLI(t, "", append([]string{"events", "show", ids[1]}, args...)...); !strings.Contains(show, "from history") {
		t.Fatalf("this month's event after the retention:\n%s", show)
	}
	var dropped int
	if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM "`+table+`_history_drops" WHERE month = ? AND events = 1`,
		old.Format("200601")).Scan(&dropped); err != nil || dropped != 1 {
		t.Fatalf("drop records of the old month = %d, %v; want 1", dropped, err)
	}
}
