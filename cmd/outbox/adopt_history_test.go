package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

// teamHistory fills the team's table with what the source document's
// adopter holds: processed PROCESSED rows finished 30 days ago and failed
// FAILED rows (retry_count 6) under aggregates of their own.
func teamHistory(t *testing.T, tt *teamTable, processed, failed int) {
	t.Helper()
	ago := map[string]string{"postgres": "now() - interval '30 days'", "mysql": "NOW() - INTERVAL 30 DAY"}[tt.kind]
	for i := range processed + failed {
		status, retries := "PROCESSED", 0
		if i >= processed {
			status, retries = "FAILED", 6
		}
		tt.exec(t, fmt.Sprintf(`INSERT INTO %s (aggregate_id, event_type, payload, status, retry_count, created_at, processed_at)
VALUES ('old-%d', 'ApprovalRequested', '{"n":%d}', '%s', %d, %s, %s)`, tt.table, i, i, status, retries, ago, ago))
	}
}

// relayUntilPurged runs `outbox relay` at its defaults but for the sink and the
// log level (debug: every move into history is logged), until it has logged
// a move into history; then stops it and returns its log.
func relayUntilPurged(t *testing.T, args []string, extra ...string) string {
	t.Helper()
	cmd, stderr := startRelay(t, append(append([]string{"relay", "--log-level", "debug", "--sink", "stdout://"}, extra...), args...)...)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited := false
	t.Cleanup(func() { // before startRelay's: this one waits for the process
		if !exited {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	var exitErr error
	waitUntil(t, 3*time.Minute, "a move into history", func() bool {
		select {
		case exitErr = <-done:
			exited = true
			return true
		default:
		}
		return strings.Contains(stderr.String(), `msg="moved finished events into history"`)
	}, stderr)
	if exited {
		t.Fatalf("relay exited before a move into history: %v\n%s", exitErr, stderr.String())
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	exited = true
	if err := <-done; err != nil {
		t.Fatalf("relay exit: %v\n%s", err, stderr.String())
	}
	return stderr.String()
}

// TestAdoptedHistoryKeptByRetention: the team's PROCESSED rows, finished
// 30 days ago, stay in the hot table through a relay run at the default
// retention (168h) after adoption, while a row the relay finished itself,
// as old, moves into the history; the relay says so at start. With
// --purge-adopted the team's rows move into the history too, and none is
// lost.
func TestAdoptedHistoryKeptByRetention(t *testing.T) {
	for _, bc := range adoptBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			tt := newTeamTable(t, bc)
			teamHistory(t, tt, 100, 3)
			args := []string{"--db", tt.dsn, "--table", tt.table}
			out := mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment"}, args...)...)
			if !strings.Contains(out, "the 103 rows that had finished before the adoption are kept") {
				t.Errorf("adopt printed %q; want the note that the finished rows are kept", out)
			}

			// The relay finishes a row of its own; then the adoption and that
			// delivery are moved back in time: adopted 20 days ago, delivered
			// 10 days ago, both before the team's rows' 30 days.
			tt.insert(t, 9, 0, "PENDING", 0, false)
			mustCLI(t, "", append([]string{"relay", "--sink", "stdout://", "--drain", "--retention", "0"}, args...)...)
			back := map[string][]string{
				"postgres": {
					`UPDATE ` + tt.table + `_adoption SET adopted_at = adopted_at - interval '20 days'`,
					`UPDATE ` + tt.table + ` SET processed_at = now() - interval '10 days' WHERE aggregate_id = 'tx-9'`,
				},
				"mysql": {
					`UPDATE ` + tt.table + `_adoption SET adopted_at = adopted_at - INTERVAL 20 DAY`,
					`UPDATE ` + tt.table + ` SET processed_at = NOW() - INTERVAL 10 DAY WHERE aggregate_id = 'tx-9'`,
				},
			}[tt.kind]
			for _, q := range back {
				tt.exec(t, q)
			}
			if n := tt.count(t, `SELECT count(*) FROM `+tt.table+` WHERE aggregate_id = 'tx-9' AND status = 'PROCESSED'`); n != 1 {
				t.Fatalf("the relay's own row: %d PROCESSED, want 1", n)
			}

			logs := relayUntilPurged(t, args)
			if !strings.Contains(logs, "finished events move into history this long after the relay finished them; the rows that finished before the table's adoption stay in the hot table") {
				t.Errorf("the relay did not say at start what retention keeps:\n%s", logs)
			}
			if n := tt.count(t, `SELECT count(*) FROM `+tt.table+` WHERE status = 'PROCESSED' AND aggregate_id LIKE 'old-%'`); n != 100 {
				t.Errorf("after a purge at the default retention %d of the team's 100 PROCESSED rows are left; want all 100", n)
			}
			if n := tt.count(t, `SELECT count(*) FROM `+tt.table+` WHERE status = 'FAILED'`); n != 3 {
				t.Errorf("%d FAILED rows left, want 3", n)
			}
			if n := tt.count(t, `SELECT count(*) FROM `+tt.table+` WHERE aggregate_id = 'tx-9'`); n != 0 {
				t.Errorf("the row the relay delivered 10 days ago is still there (%d); retention must move it", n)
			}
			if n := tt.count(t, `SELECT count(*) FROM `+tt.table+`_history WHERE aggregate_id = 'tx-9'`); n != 1 {
				t.Errorf("the row the relay delivered 10 days ago is %d times in the history; want once", n)
			}

			// Opting in moves the team's PROCESSED rows too (FAILED stay).
			logs = relayUntilPurged(t, args, "--purge-adopted")
			if !strings.Contains(logs, "including the rows the table held before its adoption (--purge-adopted)") {
				t.Errorf("the relay did not warn at start that --purge-adopted moves the team's rows:\n%s", logs)
			}
			if n := tt.count(t, `SELECT count(*) FROM `+tt.table+`_history WHERE aggregate_id LIKE 'old-%'`); n != 100 {
				t.Errorf("with --purge-adopted %d of the team's 100 PROCESSED rows are in the history; want all 100", n)
			}
			if n := tt.count(t, `SELECT count(*) FROM `+tt.table+` WHERE status = 'PROCESSED'`); n != 0 {
				t.Errorf("with --purge-adopted %d PROCESSED rows are left; want 0", n)
			}
			if n := tt.count(t, `SELECT count(*) FROM `+tt.table+` WHERE status = 'FAILED'`); n != 3 {
				t.Errorf("with --purge-adopted %d FAILED rows left, want 3", n)
			}
		})
	}
}

var deadLettersLine = regexp.MustCompile(`(?m)^dead letters\s+(\d+)$`)

// checkAdoptedFailed asserts that the table's FAILED rows are dead letters
// whose reason says they were adopted as FAILED (with the team's last
// error when it had one), through the store and the CLI.
func checkAdoptedFailed(t *testing.T, tt *teamTable, failed int, lastError string) {
	t.Helper()
	ctx := context.Background()
	args := []string{"--db", tt.dsn, "--table", tt.table}
	b, err := openBackend(ctx, tt.dsn, tt.table, outbox.Limits{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	dead, err := b.store.DeadLetters(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != failed {
		t.Fatalf("%d dead letters, want one per FAILED row (%d): %+v", len(dead), failed, dead)
	}
	for _, d := range dead {
		if !strings.HasPrefix(d.Reason, "adopted as FAILED") || d.RetryCount != 6 || !strings.Contains(d.Reason, lastError) {
			t.Errorf("dead letter %+v: want the reason \"adopted as FAILED ...\" (with %q) and retry_count 6", d, lastError)
		}
	}
	st, err := b.store.Stats(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLetters != int64(failed) {
		t.Errorf("Stats counts %d dead letters, want %d", st.DeadLetters, failed)
	}
	status := mustCLI(t, "", append([]string{"status"}, args...)...)
	if m := deadLettersLine.FindStringSubmatch(status); m == nil || m[1] != fmt.Sprint(failed) {
		t.Errorf("outbox status does not count %d dead letters:\n%s", failed, status)
	}
	// The list shows the row's last error: the team's own when it had one,
	// the reason otherwise.
	list := mustCLI(t, "", append([]string{"events", "list", "--status", "FAILED"}, args...)...)
	shown := "adopted as FAILED"
	if lastError != "" {
		shown = lastError
	}
	if n := strings.Count(list, shown); n != failed {
		t.Errorf("events list --status FAILED shows %q on %d rows, want %d:\n%s", shown, n, failed, list)
	}
	if n := tt.count(t, `SELECT count(*) FROM `+tt.table+` WHERE status = 'FAILED' AND retry_count = 6`); n != failed {
		t.Errorf("%d FAILED rows keep retry_count 6, want %d", n, failed)
	}
}

// TestAdoptedFailedRowsAreDeadLetters: the team's FAILED rows are dead
// letters after adoption, with a reason that says they were adopted as
// FAILED, and keep their retry_count.
func TestAdoptedFailedRowsAreDeadLetters(t *testing.T) {
	for _, bc := range adoptBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			tt := newTeamTable(t, bc)
			teamHistory(t, tt, 2, 3)
			out := mustCLI(t, "", "migrate", "--adopt", "--aggregate-type", "payment", "--db", tt.dsn, "--table", tt.table)
			if !strings.Contains(out, "3 FAILED kept as dead letters") {
				t.Errorf("adopt printed %q", out)
			}
			checkAdoptedFailed(t, tt, 3, "")
			// Running the migrations again adds nothing.
			mustCLI(t, "", "migrate", "--adopt", "--aggregate-type", "payment", "--db", tt.dsn, "--table", tt.table)
			checkAdoptedFailed(t, tt, 3, "")
		})
	}
}

// TestAdoptedFailedKeepsTheTeamsLastError: a team table with a last_error
// column of its own: the dead letter's reason carries it, and the row
// keeps it.
func TestAdoptedFailedKeepsTheTeamsLastError(t *testing.T) {
	for _, bc := range adoptBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			tt := newTeamTable(t, bc)
			tt.exec(t, `ALTER TABLE `+tt.table+` ADD COLUMN last_error TEXT`)
			teamHistory(t, tt, 0, 2)
			tt.exec(t, `UPDATE `+tt.table+` SET last_error = 'gateway said 422'`)
			mustCLI(t, "", "migrate", "--adopt", "--aggregate-type", "payment", "--db", tt.dsn, "--table", tt.table)
			checkAdoptedFailed(t, tt, 2, "gateway said 422")
			if n := tt.count(t, `SELECT count(*) FROM `+tt.table+` WHERE last_error = 'gateway said 422'`); n != 2 {
				t.Errorf("%d rows keep the team's last_error, want 2", n)
			}
		})
	}
}

// plainInsertEventID inserts a row with the team's own INSERT and returns
// its event_id as text.
func plainInsertEventID(t *testing.T, tt *teamTable, agg int) string {
	t.Helper()
	tt.insert(t, agg, 0, "PENDING", 0, false)
	ids := tt.strings(t, `SELECT CAST(event_id AS CHAR(36)) FROM `+tt.table+` WHERE aggregate_id = 'tx-`+fmt.Sprint(agg)+`'`)
	if len(ids) != 1 {
		t.Fatalf("event ids of tx-%d: %v", agg, ids)
	}
	return ids[0]
}

// TestAdoptedPlainInsertGetsUUIDv7: after adoption the team's plain INSERT
// gets a UUIDv7 event id (version nibble 7), as on a table outbox created.
func TestAdoptedPlainInsertGetsUUIDv7(t *testing.T) {
	for _, bc := range adoptBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			tt := newTeamTable(t, bc)
			mustCLI(t, "", "migrate", "--adopt", "--aggregate-type", "payment", "--db", tt.dsn, "--table", tt.table)
			if id := plainInsertEventID(t, tt, 1); len(id) != 36 || id[14] != '7' {
				t.Errorf("a plain INSERT into the adopted table got event_id %q; want a UUIDv7", id)
			}
		})
	}
}

// TestUpgradeTableAdoptedEarlier: a table adopted by an earlier release
// (its event_id default still gen_random_uuid() on PostgreSQL, its FAILED
// rows without dead letters) gets both by the next `outbox migrate`.
func TestUpgradeTableAdoptedEarlier(t *testing.T) {
	for _, bc := range adoptBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			tt := newTeamTable(t, bc)
			teamHistory(t, tt, 1, 2)
			args := []string{"--db", tt.dsn, "--table", tt.table}
			mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment"}, args...)...)
			// Back to what the earlier release left: the migrations from
			// the adoption's (11 on PostgreSQL, 8 on MySQL) on were not
			// applied yet.
			version := map[string]string{"postgres": "11", "mysql": "8"}[tt.kind]
			undo := []string{
				`DELETE FROM ` + tt.table + `_dead_letters`,
				`DELETE FROM ` + tt.table + `_attempts WHERE outcome = 'ADOPTED'`,
				`UPDATE ` + tt.table + ` SET last_error = NULL`,
				`DELETE FROM ` + tt.table + `_schema_migrations WHERE version_id >= ` + version,
			}
			if tt.kind == "postgres" {
				undo = append(undo, `ALTER TABLE `+tt.table+` ALTER COLUMN event_id SET DEFAULT gen_random_uuid()`)
			}
			for _, q := range undo {
				tt.exec(t, q)
			}
			if tt.kind == "postgres" {
				if id := plainInsertEventID(t, tt, 2); id[14] != '4' {
					t.Fatalf("the earlier release's default should give a UUIDv4, got %q", id)
				}
			}
			out := mustCLI(t, "", append([]string{"migrate"}, args...)...)
			if !strings.Contains(out, "applied migrations ["+version+" ") && !strings.Contains(out, "applied migrations ["+version+"]") {
				t.Errorf("migrate printed %q; want migration %s applied first", out, version)
			}
			checkAdoptedFailed(t, tt, 2, "")
			if id := plainInsertEventID(t, tt, 3); id[14] != '7' {
				t.Errorf("after the upgrade a plain INSERT got event_id %q; want a UUIDv7", id)
			}
		})
	}
}

// TestEventsPurgeKeepsAdoptedRows: `outbox events purge` keeps the rows an
// adopted table held before its adoption, as the relay's retention does;
// --adopted deletes them too.
func TestEventsPurgeKeepsAdoptedRows(t *testing.T) {
	for _, bc := range adoptBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			tt := newTeamTable(t, bc)
			teamHistory(t, tt, 5, 1)
			args := []string{"--db", tt.dsn, "--table", tt.table}
			mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment"}, args...)...)
			if out := mustCLI(t, "", append([]string{"events", "purge", "--older-than", "168h"}, args...)...); !strings.Contains(out, "deleted 0 events") {
				t.Errorf("events purge on the adopted table printed %q; want nothing deleted", out)
			}
			if n := tt.count(t, `SELECT count(*) FROM `+tt.table+` WHERE status = 'PROCESSED'`); n != 5 {
				t.Errorf("%d of the team's 5 PROCESSED rows left after events purge; want 5", n)
			}
			if out := mustCLI(t, "", append([]string{"events", "purge", "--older-than", "168h", "--adopted"}, args...)...); !strings.Contains(out, "deleted 5 events") {
				t.Errorf("events purge --adopted printed %q; want the 5 PROCESSED rows deleted", out)
			}
			if n := tt.count(t, `SELECT count(*) FROM `+tt.table+` WHERE status = 'FAILED'`); n != 1 {
				t.Errorf("%d FAILED rows left, want 1 (not in the purged statuses)", n)
			}
		})
	}
}
