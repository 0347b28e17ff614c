package postgres_test

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// TestHistoryRetentionMillion is the measurement of docs/BENCHMARKS.md
// ("History retention"), not part of the default run: it needs
// OUTBOX_BENCH_HISTORY=1 and a server with pg_stat_statements loaded
// (shared_preload_libraries):
//
//	OUTBOX_BENCH_HISTORY=1 go test -run TestHistoryRetentionMillion -v ./store/postgres/
//
// It fills the history with 1,000,000 delivered events (and 100,000
// attempts) spread evenly over the three months before this one
// (OUTBOX_BENCH_HISTORY_EVENTS changes the count), straight into the
// tables with generate_series, then runs a retention that keeps the last
// of those months: it must drop the two older months whole in under a
// second, and no statement it runs may be a DELETE (pg_stat_statements
// lists what ran).
func TestHistoryRetentionMillion(t *testing.T) {
	if os.Getenv("OUTBOX_BENCH_HISTORY") != "1" {
		t.Skip("a measurement: set OUTBOX_BENCH_HISTORY=1 to run it (docs/BENCHMARKS.md)")
	}
	events := envInt("OUTBOX_BENCH_HISTORY_EVENTS", 1_000_000)
	ctx := context.Background()
	pool := newPool(t)
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		t.Fatalf("pg_stat_statements: %v (load it with shared_preload_libraries)", err)
	}
	s := migratedStore(t, pool, postgres.Config{Table: storetest.TableName("histbench")})
	table := `"` + s.Table() + `"`
	now := time.Now().UTC()
	first := store.MonthStart(now).AddDate(0, -3, 0)
	// One event finished in each of the three months, moved by the mover:
	// it creates their partitions as it does in production.
	ids := storetest.Enqueue(t, &storetest.Harness{Store: s, Begin: func(ctx context.Context) (storetest.Tx, error) {
		tx, err := pool.Begin(ctx)
		return pgTx{tx, s}, err
	}}, storetest.PaymentEvent("m-0", 1), storetest.PaymentEvent("m-1", 1), storetest.PaymentEvent("m-2", 1))
	c, err := s.Claim(ctx, store.ClaimRequest{RelayID: "bench", Limit: 10, Lease: time.Minute})
	if err != nil || len(c.Events) != 3 {
		t.Fatalf("claim = %+v, %v", c, err)
	}
	outs := make([]store.Outcome, len(c.Events))
	for i, e := range c.Events {
		outs[i] = store.Outcome{ID: e.ID, EventID: e.EventID, Kind: store.Expired, Attempt: 1, Attempted: true, Error: "bench",
			StartedAt: c.DBTime, FinishedAt: c.DBTime}
	}
	if _, err := s.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "bench", Outcomes: outs}); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if _, err := pool.Exec(ctx, `UPDATE `+table+` SET processed_at = $1 WHERE event_id = $2::uuid`, first.AddDate(0, i, 1), id.String()); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.MoveToHistory(ctx, store.HistoryMoveRequest{}); err != nil || n != 3 {
		t.Fatalf("move = %d, %v; want 3", n, err)
	}

	started := time.Now()
	span := store.MonthStart(now).Sub(first).Seconds()
	fill := []string{
		`INSERT INTO "` + s.Table() + `_history" (id, event_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload, headers,
		    status, retry_count, created_at, available_at, finished_at, delivered_relay_id, delivered_attempt, delivered_token,
		    delivered_started_at, delivered_finished_at)
		 SELECT g, gen_random_uuid(), 'payment', 'tx-' || (g % 50000), 1, 'ApprovalRequested',
		    '{"transaction_no":"tx-1001","amount":15000}', '{}', 'PROCESSED', 0, f - interval '1 second', f - interval '1 second', f,
		    'relay-1', 1, gen_random_uuid(), f - interval '5 milliseconds', f
		 FROM generate_series(1, ` + strconv.Itoa(events) + `) g,
		    LATERAL (SELECT $1::timestamptz + (g - 1) * ($2::float8 / ` + strconv.Itoa(events) + `) * interval '1 second' AS f) x`,
		`INSERT INTO "` + s.Table() + `_attempts_history" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at,
		    finished_at, error, event_finished_at)
		 SELECT event_id, gen_random_uuid(), 'RETRY', id, 1, 'relay-1', finished_at - interval '2 seconds',
		    finished_at - interval '1 second', 'gateway timeout', finished_at
		 FROM "` + s.Table() + `_history" WHERE id % 10 = 0`,
		`ANALYZE "` + s.Table() + `_history"`,
		`ANALYZE "` + s.Table() + `_attempts_history"`,
	}
	for _, q := range fill {
		if _, err := pool.Exec(ctx, q, firstArgs(q, first, span)...); err != nil {
			t.Fatalf("fill: %v", err)
		}
	}
	t.Logf("filled %d events and %d attempts over %s..%s in %s", events, events/10, first.Format("2006-01"),
		store.MonthStart(now).AddDate(0, -1, 0).Format("2006-01"), time.Since(started).Round(time.Millisecond))
	months, err := s.HistoryMonths(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range months {
		t.Logf("before: %s ~%d events ~%d attempts", m.Label(), m.Events, m.Attempts)
	}

	// A retention that keeps the last month: its cutoff is in the middle
	// of it, so the two months before end before the cutoff.
	lastMonth := store.MonthStart(now).AddDate(0, -1, 0)
	cutoff := lastMonth.AddDate(0, 0, 14)
	var kept int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM "`+s.Table()+`_history" WHERE finished_at >= $1`, lastMonth).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		t.Fatal(err)
	}
	started = time.Now()
	drop, err := s.DropHistoryBefore(ctx, cutoff)
	took := time.Since(started)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("retention with cutoff %s dropped %d months in %s", cutoff.Format(time.RFC3339), len(drop.Months), took.Round(time.Microsecond))
	for _, m := range drop.Months {
		t.Logf("dropped %s: %d events, %d attempts", m.Label(), m.Events, m.Attempts)
	}
	rows, err := pool.Query(ctx, `SELECT query, calls, rows, round(total_exec_time::numeric, 2)
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	deleteRE := regexp.MustCompile(`(?i)^\s*delete\b`)
	var drops int
	for rows.Next() {
		var q string
		var calls, n int64
		var ms float64
		if err := rows.Scan(&q, &calls, &n, &ms); err != nil {
			t.Fatal(err)
		}
		t.Logf("statement: calls %d, rows %d, %.2f ms: %s", calls, n, ms, strings.Join(strings.Fields(q), " "))
		if deleteRE.MatchString(q) {
			t.Errorf("retention ran a DELETE: %s", q)
		}
		if strings.HasPrefix(strings.TrimSpace(q), "DROP TABLE") {
			drops += int(calls)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(drop.Months) != 2 || drops != 4 {
		t.Errorf("dropped %d months with %d DROP TABLE statements; want the 2 older months, 4 partitions (events and attempts)", len(drop.Months), drops)
	}
	if took > time.Second {
		t.Errorf("retention took %s; want under a second", took)
	}
	var left int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM "`+s.Table()+`_history"`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	t.Logf("left in the history: %d events (the last month)", left)
	if left != kept {
		t.Errorf("left %d events; want the last month's %d", left, kept)
	}
}

// firstArgs binds the fill's start and span to the statements that take them.
func firstArgs(q string, first time.Time, span float64) []any {
	if strings.Contains(q, "$1") {
		return []any{first, span}
	}
	return nil
}
