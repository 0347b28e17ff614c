package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/txoutbox/outbox/store/mysql"
)

// teamTable is a database holding the team's own outbox table, as their
// Spring service created it before adopting outbox.
type teamTable struct {
	kind, dsn, table string
	db               *sql.DB
}

// teamDDL is the team's table: the MySQL one verbatim, and its PostgreSQL
// equivalent.
var teamDDL = map[string]string{
	"mysql": `CREATE TABLE %s (
    id BIGINT PRIMARY KEY AUTO_INCREMENT, aggregate_id VARCHAR(100) NOT NULL,
    event_type VARCHAR(200) NOT NULL, payload JSON NOT NULL,
    status VARCHAR(20) DEFAULT 'PENDING', retry_count INT DEFAULT 0,
    created_at TIMESTAMP NOT NULL, processed_at TIMESTAMP)`,
	"postgres": `CREATE TABLE %s (
    id BIGSERIAL PRIMARY KEY, aggregate_id VARCHAR(100) NOT NULL,
    event_type VARCHAR(200) NOT NULL, payload JSONB NOT NULL,
    status VARCHAR(20) DEFAULT 'PENDING', retry_count INT DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL, processed_at TIMESTAMPTZ)`,
}

func adoptBackends() []backendCase {
	return []backendCase{{"postgres", postgresDSN}, {"mysql", mysqlDSN}}
}

// newTeamTable creates the team's table in a schema (PostgreSQL) or
// database (MySQL) of the test's own, dropped when the test ends.
func newTeamTable(t *testing.T, bc backendCase) *teamTable {
	t.Helper()
	tt := &teamTable{kind: bc.name, dsn: bc.dsn(t), table: newTable()}
	tt.db = openSQL(t, tt.kind, tt.dsn)
	tt.exec(t, fmt.Sprintf(teamDDL[tt.kind], tt.table))
	return tt
}

func openSQL(t *testing.T, kind, dsn string) *sql.DB {
	t.Helper()
	var db *sql.DB
	switch kind {
	case "postgres":
		var err error
		if db, err = sql.Open("pgx", dsn); err != nil {
			t.Fatal(err)
		}
	case "mysql":
		c, err := mysql.NewConnector(dsn)
		if err != nil {
			t.Fatal(err)
		}
		db = sql.OpenDB(c)
	case "sqlite":
		t.Fatal("openSQL: use the sqlite store")
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func (tt *teamTable) exec(t *testing.T, q string) {
	t.Helper()
	if _, err := tt.db.ExecContext(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// insert writes one row as the team's service does: only its own columns.
func (tt *teamTable) insert(t *testing.T, agg, seq int, status string, retries int, processed bool) {
	t.Helper()
	processedAt := "NULL"
	if processed {
		processedAt = "'2026-01-02 03:04:05'"
	}
	tt.exec(t, fmt.Sprintf(`INSERT INTO %s (aggregate_id, event_type, payload, status, retry_count, created_at, processed_at)
VALUES ('tx-%d', 'ApprovalRequested', '{"agg":%d,"seq":%d}', '%s', %d, '2026-01-01 00:00:00', %s)`,
		tt.table, agg, agg, seq, status, retries, processedAt))
}

// rows returns the team's columns of every row, by id.
func (tt *teamTable) rows(t *testing.T) map[string]teamRow {
	t.Helper()
	rs, err := tt.db.QueryContext(context.Background(), `SELECT id, aggregate_id, event_type, payload, status, retry_count, created_at, processed_at FROM `+tt.table+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]teamRow{}
	for rs.Next() {
		var r teamRow
		var processed sql.NullString
		if err := rs.Scan(&r.id, &r.agg, &r.eventType, &r.payload, &r.status, &r.retries, &r.created, &processed); err != nil {
			t.Fatal(err)
		}
		r.processed = processed.String
		out[r.id] = r
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type teamRow struct {
	id, agg, eventType, payload, status, retries, created, processed string
}

// columns returns the team table's column names, in order.
func (tt *teamTable) columns(t *testing.T) []string {
	t.Helper()
	q := `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`
	if tt.kind == "mysql" {
		q = `SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position`
	}
	return tt.strings(t, q, tt.table)
}

// tables returns every table in the test's schema or database.
func (tt *teamTable) tables(t *testing.T) []string {
	t.Helper()
	q := `SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1`
	if tt.kind == "mysql" {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY 1`
	}
	return tt.strings(t, q)
}

// indexes returns the team table's index names.
func (tt *teamTable) indexes(t *testing.T) []string {
	t.Helper()
	q := `SELECT indexname::text FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1 ORDER BY 1`
	if tt.kind == "mysql" {
		q = `SELECT DISTINCT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? ORDER BY 1`
	}
	return tt.strings(t, q, tt.table)
}

func (tt *teamTable) strings(t *testing.T, q string, args ...any) []string {
	t.Helper()
	rs, err := tt.db.QueryContext(context.Background(), q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var s string
		if err := rs.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func (tt *teamTable) count(t *testing.T, q string) int {
	t.Helper()
	var n int
	if err := tt.db.QueryRowContext(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// fillEveryOldState writes 6 aggregates of 6 events each, interleaved by
// id, in every state the team's old scheduler left, and returns the
// events that must be delivered: the PENDING ones and those stuck in
// PROCESSING, per aggregate in order.
func fillEveryOldState(t *testing.T, tt *teamTable) map[int][]int {
	t.Helper()
	state := func(agg, seq int) string {
		switch agg {
		case 1: // done, one stuck in PROCESSING, then pending
			return []string{"PROCESSED", "PROCESSED", "PROCESSING", "PENDING", "PENDING", "PENDING"}[seq]
		case 2: // a failure in the middle
			return []string{"PROCESSED", "FAILED", "PENDING", "PENDING", "PENDING", "PENDING"}[seq]
		case 3:
			return "PROCESSED"
		case 4: // the last one failed
			return []string{"PROCESSED", "PROCESSED", "PROCESSED", "PROCESSED", "PROCESSED", "FAILED"}[seq]
		case 5: // the first one stuck in PROCESSING
			return []string{"PROCESSING", "PENDING", "PENDING", "PENDING", "PENDING", "PENDING"}[seq]
		}
		return "PENDING"
	}
	want := map[int][]int{}
	for i := 0; i < 36; i++ {
		agg, seq := i%6, i/6
		st := state(agg, seq)
		retries := map[string]int{"FAILED": 5, "PROCESSING": 1}[st]
		tt.insert(t, agg, seq, st, retries, st == "PROCESSED")
		if st == "PENDING" || st == "PROCESSING" {
			want[agg] = append(want[agg], seq)
		}
	}
	return want
}

// TestAdoptTeamTableThenDrain: the team's table holding rows in every old
// state is refused by a plain migrate (nothing changes), adopted in place
// (dry run first: nothing changes), and a relay then delivers every
// PENDING row (and every row stuck in PROCESSING) once, in order per
// aggregate, and nothing else: PROCESSED and FAILED rows are not sent and
// keep every column (with --retention 0: the default retention would
// purge the team's PROCESSED history). A row the team's service inserts afterwards with its
// old INSERT is delivered too.
func TestAdoptTeamTableThenDrain(t *testing.T) {
	for _, bc := range adoptBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			tt := newTeamTable(t, bc)
			want := fillEveryOldState(t, tt)
			before, tablesBefore := tt.rows(t), tt.tables(t)
			unchanged := func(step string) {
				t.Helper()
				if got := tt.rows(t); !mapsEqual(got, before) {
					t.Fatalf("%s changed the team's rows:\nbefore %v\nafter  %v", step, before, got)
				}
				if got := tt.tables(t); !slices.Equal(got, tablesBefore) {
					t.Fatalf("%s changed the tables: before %v, after %v", step, tablesBefore, got)
				}
			}
			args := []string{"--db", tt.dsn, "--table", tt.table}

			// A plain migrate refuses, naming the missing columns and the command.
			_, errOut, code := cli(t, "", append([]string{"migrate"}, args...)...)
			if code == 0 || !strings.Contains(errOut, "event_id") || !strings.Contains(errOut, "aggregate_type") ||
				!strings.Contains(errOut, "outbox migrate --adopt --table "+tt.table) {
				t.Fatalf("migrate on the team's table: exit %d, stderr %q; want a refusal naming the missing columns and the adopt command", code, errOut)
			}
			unchanged("a refused migrate")
			if _, errOut, code := cli(t, "", append([]string{"migrate", "--check"}, args...)...); code == 0 || !strings.Contains(errOut, "lacks the outbox columns") {
				t.Fatalf("migrate --check on the team's table: exit %d, stderr %q; want non-zero with the reason", code, errOut)
			}

			// The dry run prints the SQL and changes nothing.
			out := mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment", "--dry-run"}, args...)...)
			for _, s := range []string{"ALTER TABLE", "ADD COLUMN", "event_id", tt.table + "_attempts", "'ADOPTED'", "2 FAILED kept as dead letters", "adopted as FAILED"} {
				if !strings.Contains(out, s) {
					t.Errorf("adopt --dry-run does not print %q:\n%s", s, out)
				}
			}
			online := map[string]string{"postgres": "CREATE INDEX CONCURRENTLY", "mysql": "ALGORITHM=INPLACE, LOCK=NONE"}[tt.kind]
			if !strings.Contains(out, online) {
				t.Errorf("adopt --dry-run builds no index online (%s):\n%s", online, out)
			}
			unchanged("adopt --dry-run")

			out = mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment"}, args...)...)
			if !strings.Contains(out, "36 rows kept, 2 PROCESSING set to PENDING") {
				t.Errorf("adopt printed %q", out)
			}
			if n := tt.count(t, `SELECT count(*) FROM `+tt.table+`_attempts WHERE outcome = 'ADOPTED'`); n != 4 {
				t.Errorf("%d ADOPTED audit rows, want one per PROCESSING and FAILED row (2 + 2)", n)
			}
			// Every row keeps its state, but PROCESSING becomes PENDING.
			after := tt.rows(t)
			for id, r := range before {
				if r.status == "PROCESSING" {
					r.status = "PENDING"
				}
				if after[id] != r {
					t.Errorf("row %s after adoption = %+v, want %+v", id, after[id], r)
				}
			}
			if out := mustCLI(t, "", append([]string{"migrate", "--check"}, args...)...); !strings.Contains(out, "OK") || !strings.Contains(out, "adopted") {
				t.Errorf("migrate --check after adoption printed %q", out)
			}
			if out := mustCLI(t, "", append([]string{"migrate"}, args...)...); !strings.Contains(out, "up to date") {
				t.Errorf("migrate after adoption printed %q, want up to date", out)
			}

			// The team's service keeps inserting with its old INSERT.
			tt.insert(t, 6, 0, "PENDING", 0, false)
			want[6] = []int{0}

			gw := &gateway{}
			srv := httptest.NewServer(gw)
			defer srv.Close()
			mustCLI(t, "", append([]string{"relay", "--sink", srv.URL + "/approve", "--drain", "--on-failure", "continue",
				"--poll-interval", "20ms", "--batch", "10", "--retention", "0"}, args...)...)
			rs, _ := gw.snapshot()
			got, seen := map[int][]int{}, map[string]bool{}
			for _, r := range rs {
				if seen[r.eventID] {
					t.Errorf("event %s (tx-%d #%d) delivered twice", r.eventID, r.agg, r.seq)
				}
				seen[r.eventID] = true
				got[r.agg] = append(got[r.agg], r.seq)
			}
			if !mapsEqualFunc(got, want) {
				t.Fatalf("delivered per aggregate %v, want %v (every PENDING and PROCESSING row once, in order, and nothing else)", got, want)
			}
			final := tt.rows(t)
			for id, r := range after {
				f := final[id]
				if r.status == "PENDING" {
					if f.status != "PROCESSED" || f.processed == "" || f.payload != r.payload || f.created != r.created || f.agg != r.agg {
						t.Errorf("delivered row %s = %+v; want PROCESSED, processed_at set, the rest as %+v", id, f, r)
					}
					continue
				}
				if f != r {
					t.Errorf("row %s was not to be delivered but changed: %+v, was %+v", id, f, r)
				}
			}
		})
	}
}

// TestAdoptRefusalAndDownKeepTeamRows: on the team's table, migrate --down
// (with --yes) refuses and drops nothing; after adoption, --down needs
// --yes, its --dry-run changes nothing, and it removes only what adoption
// added: the table is back to the team's columns and indexes, every row in
// place, and can be adopted again.
func TestAdoptRefusalAndDownKeepTeamRows(t *testing.T) {
	for _, bc := range adoptBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			tt := newTeamTable(t, bc)
			fillEveryOldState(t, tt)
			rows, cols, idx, tables := tt.rows(t), tt.columns(t), tt.indexes(t), tt.tables(t)
			args := []string{"--db", tt.dsn, "--table", tt.table}

			_, errOut, code := cli(t, "", append([]string{"migrate", "--down", "--yes"}, args...)...)
			if code == 0 || !strings.Contains(errOut, "will not drop it") {
				t.Fatalf("migrate --down --yes on the team's table: exit %d, stderr %q; want a refusal", code, errOut)
			}
			if got := tt.rows(t); !mapsEqual(got, rows) || !slices.Equal(tt.tables(t), tables) {
				t.Fatalf("a refused --down changed the team's table: %v tables %v", got, tt.tables(t))
			}

			mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment"}, args...)...)
			_, errOut, code = cli(t, "", append([]string{"migrate", "--down"}, args...)...)
			if code == 0 || !strings.Contains(errOut, "--yes") || !strings.Contains(errOut, "22 events are unfinished") {
				t.Fatalf("migrate --down without --yes on the adopted table: exit %d, stderr %q; want a refusal with the unfinished count", code, errOut)
			}
			adoptedCols, adoptedTables := tt.columns(t), tt.tables(t)
			out := mustCLI(t, "", append([]string{"migrate", "--down", "--dry-run"}, args...)...)
			if !strings.Contains(out, "DROP COLUMN") || strings.Contains(out, "DROP TABLE IF EXISTS "+map[string]string{"postgres": `"`, "mysql": "`"}[tt.kind]+tt.table+map[string]string{"postgres": `"`, "mysql": "`"}[tt.kind]+";") {
				t.Errorf("--down --dry-run on the adopted table:\n%s", out)
			}
			if !slices.Equal(tt.columns(t), adoptedCols) || !slices.Equal(tt.tables(t), adoptedTables) {
				t.Fatalf("--down --dry-run changed the schema")
			}

			mustCLI(t, "", append([]string{"migrate", "--down", "--yes"}, args...)...)
			if got := tt.columns(t); !slices.Equal(got, cols) {
				t.Errorf("after --down the columns are %v, want the team's %v", got, cols)
			}
			if got := tt.indexes(t); !slices.Equal(got, idx) {
				t.Errorf("after --down the indexes are %v, want the team's %v", got, idx)
			}
			if got := tt.tables(t); !slices.Equal(got, tables) {
				t.Errorf("after --down the tables are %v, want %v", got, tables)
			}
			got := tt.rows(t)
			for id, r := range rows {
				if r.status == "PROCESSING" {
					r.status = "PENDING" // adoption's audited change; the audit went with --down
				}
				if got[id] != r {
					t.Errorf("row %s after --down = %+v, want %+v", id, got[id], r)
				}
			}
			if len(got) != len(rows) {
				t.Errorf("%d rows after --down, want %d", len(got), len(rows))
			}
			// Back to the team's table: refused again, and adoptable again.
			if _, _, code := cli(t, "", append([]string{"migrate"}, args...)...); code == 0 {
				t.Errorf("migrate after --down succeeded; want the foreign-table refusal")
			}
			mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment"}, args...)...)
			mustCLI(t, "", append([]string{"migrate", "--check"}, args...)...)
		})
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func mapsEqualFunc(a, b map[int][]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestAdoptedTableSessionTimeZone: after adoption, the team's unchanged
// INSERT from a MySQL session in a zone behind UTC (or ahead of it) is due
// at once: the insert trigger fills available_at in UTC, and no column
// default that adoption added fills it first (the trigger would move that
// UTC time by the session's offset once more).
func TestAdoptedTableSessionTimeZone(t *testing.T) {
	t.Parallel()
	tt := newTeamTable(t, backendCase{"mysql", mysqlDSN})
	args := []string{"--db", tt.dsn, "--table", tt.table}
	mustCLI(t, "", append([]string{"migrate", "--adopt", "--aggregate-type", "payment"}, args...)...)
	ctx := context.Background()
	for _, zone := range []string{"-05:00", "+09:00"} {
		conn, err := tt.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "SET time_zone = '"+zone+"'"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+tt.table+" (aggregate_id, event_type, payload, created_at) VALUES (?, 'ApprovalRequested', '{}', NOW())", "tz"+zone); err != nil {
			t.Fatal(err)
		}
		var away float64
		var eventID string
		if err := conn.QueryRowContext(ctx, "SELECT ABS(TIMESTAMPDIFF(MICROSECOND, available_at, UTC_TIMESTAMP(6))) / 1e6, event_id FROM "+tt.table+" WHERE aggregate_id = ?", "tz"+zone).Scan(&away, &eventID); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		if away > 60 {
			t.Errorf("session at %s: available_at is %.0f s away from UTC now; want it due at once", zone, away)
		}
		if len(eventID) != 36 || eventID[14] != '7' {
			t.Errorf("session at %s: event_id %q; want the trigger's UUIDv7", zone, eventID)
		}
	}
}
