package main

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMigrateDryRunCheckAndDownCount: on an empty database, --check says
// the table is missing and --dry-run prints the CREATE TABLE but creates
// nothing (not even the version table); after migrate, --check is OK, and
// --down without --yes refuses with the count of unfinished events and
// drops nothing.
func TestMigrateDryRunCheckAndDownCount(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			args := []string{"--db", dsn, "--table", table}
			if _, errOut, code := cli(t, "", append([]string{"migrate", "--check"}, args...)...); code == 0 || !strings.Contains(errOut, "does not exist") {
				t.Fatalf("migrate --check on an empty database: exit %d, stderr %q; want non-zero, table missing", code, errOut)
			}
			out := mustCLI(t, "", append([]string{"migrate", "--dry-run"}, args...)...)
			if !strings.Contains(out, "CREATE TABLE IF NOT EXISTS") || !strings.Contains(out, table+"_attempts") {
				t.Errorf("migrate --dry-run printed:\n%s", out)
			}
			// Nothing was created: --check still finds no table and
			// --status no version table (version 0).
			if _, _, code := cli(t, "", append([]string{"migrate", "--check"}, args...)...); code == 0 {
				t.Fatal("migrate --dry-run created the table")
			}
			if tables := listTables(t, bc.name, dsn); len(tables) != 0 {
				t.Fatalf("migrate --dry-run created tables %v", tables)
			}
			mustCLI(t, "", append([]string{"migrate"}, args...)...)
			if out := mustCLI(t, "", append([]string{"migrate", "--check"}, args...)...); !strings.HasPrefix(out, table+": OK") {
				t.Errorf("migrate --check after migrate printed %q", out)
			}
			if out := mustCLI(t, "", append([]string{"migrate", "--dry-run"}, args...)...); !strings.Contains(out, "up to date") {
				t.Errorf("migrate --dry-run when up to date printed %q", out)
			}
			mustCLI(t, eventLines(3, 2, ""), append([]string{"enqueue"}, args...)...)
			_, errOut, code := cli(t, "", append([]string{"migrate", "--down"}, args...)...)
			if code == 0 || !strings.Contains(errOut, "holds 3 unfinished events") || !strings.Contains(errOut, "--yes") {
				t.Fatalf("migrate --down without --yes: exit %d, stderr %q; want a refusal with the count", code, errOut)
			}
			if out := mustCLI(t, "", append([]string{"migrate", "--down", "--dry-run"}, args...)...); !strings.Contains(out, "DROP TABLE") {
				t.Errorf("migrate --down --dry-run printed %q", out)
			}
			if st := statusJSON(t, dsn, table); count(st, "PENDING") != 3 {
				t.Fatalf("after a refused --down and a dry run: %v, want the 3 events", st)
			}
			if out := mustCLI(t, "", append([]string{"migrate", "--down", "--yes"}, args...)...); !strings.Contains(out, "dropped (3 unfinished events)") {
				t.Errorf("migrate --down --yes printed %q", out)
			}
			if _, errOut, code := cli(t, "", append([]string{"migrate", "--check"}, args...)...); code == 0 || !strings.Contains(errOut, "does not exist") {
				t.Errorf("migrate --check after --down: exit %d, stderr %q", code, errOut)
			}
		})
	}
}

// TestSQLiteForeignTableRefused: SQLite refuses to migrate, drop or adopt
// a table it did not create, and says where adoption is supported.
func TestSQLiteForeignTableRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "team.db")
	dsn, table := "sqlite://"+path, newTable()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE ` + table + ` (id INTEGER PRIMARY KEY, aggregate_id TEXT NOT NULL, event_type TEXT NOT NULL, payload TEXT NOT NULL, status TEXT DEFAULT 'PENDING', retry_count INT DEFAULT 0, created_at TEXT NOT NULL, processed_at TEXT);
INSERT INTO ` + table + ` (aggregate_id, event_type, payload, created_at) VALUES ('tx-1', 'A', '{}', '2026-01-01 00:00:00')`); err != nil {
		t.Fatal(err)
	}
	args := []string{"--db", dsn, "--table", table}
	for _, c := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"migrate"}, "supported on PostgreSQL and MySQL/MariaDB"},
		{[]string{"migrate", "--down", "--yes"}, "will not drop it"},
		{[]string{"migrate", "--adopt", "--aggregate-type", "payment"}, "supported on PostgreSQL and MySQL/MariaDB"},
		{[]string{"migrate", "--check"}, "lacks the outbox columns"},
	} {
		_, errOut, code := cli(t, "", append(c.cmd, args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("outbox %v on a foreign SQLite table: exit %d, stderr %q; want an error with %q", c.cmd, code, errOut, c.want)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the team's SQLite table: %d rows, %v; want its 1 row", n, err)
	}
	var tables int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table'`).Scan(&tables); err != nil || tables != 1 {
		t.Fatalf("%d tables in the database, %v; want only the team's", tables, err)
	}
}

// listTables returns the tables in the test's schema, database or file.
func listTables(t *testing.T, kind, dsn string) []string {
	t.Helper()
	if kind == "sqlite" {
		db, err := sql.Open("sqlite", strings.TrimPrefix(dsn, "sqlite://"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		tt := &teamTable{kind: kind, db: db}
		return tt.strings(t, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY 1`)
	}
	tt := &teamTable{kind: kind, db: openSQL(t, kind, dsn)}
	return tt.tables(t)
}

// TestAdoptAfterVersionWronglyRecorded: a team that ran an older outbox's
// migrate on its table has version 1 recorded in the version table
// although the table never got the outbox's columns. --check still calls
// it foreign, --down --yes still refuses to drop it (the older one dropped
// the team's table), and --adopt upgrades it, recording version 1 once.
func TestAdoptAfterVersionWronglyRecorded(t *testing.T) {
	for _, bc := range adoptBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			tt := newTeamTable(t, bc)
			fillEveryOldState(t, tt)
			versions := tt.table + "_schema_migrations"
			ddl := `CREATE TABLE %s (id integer PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY, version_id bigint NOT NULL, is_applied boolean NOT NULL, tstamp timestamp NOT NULL DEFAULT now())`
			if tt.kind == "mysql" {
				ddl = `CREATE TABLE %s (id bigint(20) unsigned NOT NULL AUTO_INCREMENT, version_id bigint NOT NULL, is_applied boolean NOT NULL, tstamp datetime NULL default CURRENT_TIMESTAMP, PRIMARY KEY(id))`
			}
			tt.exec(t, fmt.Sprintf(ddl, versions))
			tt.exec(t, `INSERT INTO `+versions+` (version_id, is_applied) VALUES (0, true), (1, true)`)
			rows := tt.rows(t)
			args := []string{"--db", tt.dsn, "--table", tt.table}

			if _, errOut, code := cli(t, "", append([]string{"migrate", "--check"}, args...)...); code == 0 || !strings.Contains(errOut, "lacks the outbox columns") {
				t.Fatalf("migrate --check: exit %d, stderr %q; want the table called foreign", code, errOut)
			}
			if _, errOut, code := cli(t, "", append([]string{"migrate", "--down", "--yes"}, args...)...); code == 0 || !strings.Contains(errOut, "will not drop it") {
				t.Fatalf("migrate --down --yes: exit %d, stderr %q; want a refusal", code, errOut)
			}
			if got := tt.rows(t); !mapsEqual(got, rows) {
				t.Fatalf("a refused --down changed the rows")
			}
			mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment"}, args...)...)
			mustCLI(t, "", append([]string{"migrate", "--check"}, args...)...)
			if n := tt.count(t, `SELECT count(*) FROM `+versions+` WHERE version_id = 1`); n != 1 {
				t.Errorf("version 1 recorded %d times, want once", n)
			}
		})
	}
}

// TestAdoptInterruptedIsFinishedByRunningItAgain: an adoption that stopped
// before its last index and before recording version 1 leaves a table
// that migrate and the relay refuse, naming the command that finishes it;
// running --adopt again builds what is missing and records the version.
func TestAdoptInterruptedIsFinishedByRunningItAgain(t *testing.T) {
	for _, bc := range adoptBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			tt := newTeamTable(t, bc)
			fillEveryOldState(t, tt)
			args := []string{"--db", tt.dsn, "--table", tt.table}
			mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment"}, args...)...)
			rows, indexes := tt.rows(t), tt.indexes(t)
			// Undo the last steps, as if the run had stopped there. On
			// PostgreSQL the later migrations replace the first one's
			// indexes (they name status, which the hot path's updates may
			// not change under an index): the lease index is the one both
			// have, by name.
			idx := tt.table + "_expiry_idx"
			if tt.kind != "mysql" {
				idx = tt.table + "_lease_idx"
			}
			if tt.kind == "mysql" {
				tt.exec(t, "ALTER TABLE "+tt.table+" DROP INDEX "+idx)
			} else {
				tt.exec(t, "DROP INDEX "+idx)
			}
			// The run stopped before it recorded version 1, so it applied no
			// later migration either: none is recorded (their objects are
			// there, and the later migrations are idempotent).
			tt.exec(t, "DELETE FROM "+tt.table+"_schema_migrations WHERE version_id >= 1")

			for _, cmd := range [][]string{{"migrate"}, {"relay", "--sink", "discard://", "--drain"}} {
				_, errOut, code := cli(t, "", append(cmd, args...)...)
				if code == 0 || !strings.Contains(errOut, "migrate") {
					t.Errorf("outbox %v on a half-adopted table: exit %d, stderr %q; want a refusal naming the fix", cmd, code, errOut)
				}
			}
			if _, errOut, _ := cli(t, "", append([]string{"migrate"}, args...)...); !strings.Contains(errOut, "--adopt") {
				t.Errorf("migrate on a half-adopted table: %q; want it to name --adopt", errOut)
			}
			out := mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment", "--dry-run"}, args...)...)
			adoption, _, _ := strings.Cut(out, "-- record schema version 1") // the later migrations follow
			if !strings.Contains(adoption, idx) || strings.Contains(adoption, "ADD COLUMN") {
				t.Errorf("adopt --dry-run on a half-adopted table should build %s and add no column:\n%s", idx, out)
			}
			mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment"}, args...)...)
			mustCLI(t, "", append([]string{"migrate", "--check"}, args...)...)
			if got := tt.indexes(t); !slices.Equal(got, indexes) {
				t.Errorf("indexes after the second run %v, want %v", got, indexes)
			}
			if got := tt.rows(t); !mapsEqual(got, rows) {
				t.Errorf("the second run changed rows")
			}
		})
	}
}

// TestMigrateDownOneEvent: the count of unfinished events reads right for
// one event, in the refusal and in what --down --yes prints.
func TestMigrateDownOneEvent(t *testing.T) {
	t.Parallel()
	dsn, table := "sqlite://"+filepath.Join(t.TempDir(), "outbox.db"), newTable()
	args := []string{"--db", dsn, "--table", table}
	mustCLI(t, "", append([]string{"migrate"}, args...)...)
	mustCLI(t, eventLines(1, 1, ""), append([]string{"enqueue"}, args...)...)
	_, errOut, code := cli(t, "", append([]string{"migrate", "--down"}, args...)...)
	if code == 0 || !strings.Contains(errOut, "which holds 1 unfinished event (PENDING") {
		t.Fatalf("migrate --down without --yes: exit %d, stderr %q; want a refusal naming 1 unfinished event", code, errOut)
	}
	if out := mustCLI(t, "", append([]string{"migrate", "--down", "--yes"}, args...)...); !strings.Contains(out, "dropped (1 unfinished event)") {
		t.Errorf("migrate --down --yes printed %q, want %q", out, "dropped (1 unfinished event)")
	}
}

// TestDownRefusalCounts pins the refusal of migrate --down for one event
// and for several, on an outbox table and on an adopted one.
func TestDownRefusalCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		adopted    bool
		unfinished int64
		want       string
	}{
		{false, 0, "which holds 0 unfinished events (PENDING"},
		{false, 1, "which holds 1 unfinished event (PENDING"},
		{false, 3, "which holds 3 unfinished events (PENDING"},
		{true, 1, "; 1 event is unfinished; add --yes"},
		{true, 22, "; 22 events are unfinished; add --yes"},
	} {
		err := downRefusal("payment_outbox", tc.adopted, tc.unfinished)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("downRefusal(adopted=%v, %d) = %v, want it to say %q", tc.adopted, tc.unfinished, err, tc.want)
		}
	}
	for n, want := range map[int64]string{1: "was", 2: "were"} {
		if _, _, were := unfinishedWords(n); were != want {
			t.Errorf("unfinishedWords(%d) says %q, want %q", n, were, want)
		}
	}
}
