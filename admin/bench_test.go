package admin_test

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/testenv/pgtest"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// BenchmarkAdminPostgres measures the admin API on a PostgreSQL outbox of
// OUTBOX_ADMIN_BENCH_ROWS events (default 1,000,000: 0.1% FAILED each with
// a BLOCKED event behind it, 2,000 PENDING, the rest PROCESSED, one event
// every 10 ms, an attempt row for every event of the last hour, and 6,000
// fresh attempts in the last minute). Each request is timed; p95 and p50
// per request kind are reported.
//
//	go test -run '^$' -bench BenchmarkAdminPostgres -benchtime 200x ./admin/
func BenchmarkAdminPostgres(b *testing.B) {
	rows := 1_000_000
	if s := os.Getenv("OUTBOX_ADMIN_BENCH_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 10_000 {
			b.Fatalf("OUTBOX_ADMIN_BENCH_ROWS=%q: want a number of at least 10000", s)
		}
		rows = n
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.Postgres.Addr(b))
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	table := storetest.TableName("admbench")
	reuse := os.Getenv("OUTBOX_ADMIN_BENCH_TABLE") // a table a run with OUTBOX_ADMIN_BENCH_KEEP=1 loaded
	if reuse != "" {
		table = reuse
	}
	st, err := postgres.New(pool, postgres.Config{Table: table, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if os.Getenv("OUTBOX_ADMIN_BENCH_KEEP") == "1" || reuse != "" { // to EXPLAIN the queries afterwards
			b.Logf("kept table %s", table)
			return
		}
		if _, err := pool.Exec(context.Background(), pgtest.DropTables(table)); err != nil {
			b.Errorf("cleanup: %v", err)
		}
	}()
	if _, err := st.MigrateUp(ctx); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	n := strconv.Itoa(rows)
	load := []string{
		`INSERT INTO "` + table + `" (event_id, aggregate_type, aggregate_id, event_type, payload, status, retry_count,
            created_at, processed_at, available_at, last_error)
         SELECT gen_random_uuid(), 'payment', 'tx-' || (i % 200000), 'ApprovalRequested',
                json_build_object('transaction_no', 'tx-' || i, 'amount', i % 100000),
                CASE WHEN i % 1000 = 0 AND i <= ` + n + ` - 2000 THEN 'FAILED'
                     WHEN i % 1000 = 1 AND i <= ` + n + ` - 2000 THEN 'BLOCKED'
                     WHEN i > ` + n + ` - 2000 THEN 'PENDING' ELSE 'PROCESSED' END,
                CASE WHEN i % 1000 = 0 THEN 5 ELSE 0 END,
                now() - (` + n + ` - i) * interval '10 ms',
                CASE WHEN i % 1000 IN (0, 1) OR i > ` + n + ` - 2000 THEN NULL ELSE now() - (` + n + ` - i) * interval '10 ms' END,
                now() - (` + n + ` - i) * interval '10 ms',
                CASE WHEN i % 1000 = 0 THEN 'http sink: event x: POST https://gw/approve: status 503 Service Unavailable' END
         FROM generate_series(1, ` + n + `) AS i`,
		`INSERT INTO "` + table + `_attempts" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
         SELECT event_id, gen_random_uuid(), CASE WHEN status = 'FAILED' THEN 'FAILED' ELSE 'DELIVERED' END, id, 1, 'bench',
                created_at, created_at + interval '2 ms', last_error
         FROM "` + table + `" WHERE created_at > now() - interval '1 hour' AND status IN ('PROCESSED', 'FAILED')`,
		// The steady state autovacuum keeps a table of this size in:
		// statistics, and a visibility map for index-only scans.
		`VACUUM ANALYZE "` + table + `"`,
		`VACUUM ANALYZE "` + table + `_attempts"`,
	}
	if reuse != "" {
		load = nil
	}
	for _, q := range load {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatalf("load: %v", err)
		}
	}
	b.Logf("loaded %d events in %s", rows, time.Since(start).Round(time.Millisecond))
	// The last minute as a relay delivering 100 events/s leaves it, not
	// yet vacuumed: what the overview reads on every refresh.
	if _, err := pool.Exec(ctx, `INSERT INTO "`+table+`_attempts" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at)
        SELECT gen_random_uuid(), gen_random_uuid(), 'DELIVERED', i, 1, 'bench', now() - i * interval '10 ms', now() - i * interval '10 ms'
        FROM generate_series(1, 6000) AS i`); err != nil {
		b.Fatal(err)
	}
	var someID, failedID string
	if err := pool.QueryRow(ctx, `SELECT event_id::text FROM "`+table+`" WHERE id = $1`, rows/2).Scan(&someID); err != nil {
		b.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT event_id::text FROM "`+table+`" WHERE status = 'FAILED' LIMIT 1`).Scan(&failedID); err != nil {
		b.Fatal(err)
	}
	h, err := admin.New(admin.Config{Store: st, Tokens: testTokens, FailedBlocks: true, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	cases := []struct{ name, path string }{
		{"list", "/api/v1/events"},
		{"list_status_failed", "/api/v1/events?status=FAILED"},
		{"list_status_pending", "/api/v1/events?status=PENDING"},
		{"list_aggregate", "/api/v1/events?aggregate_type=payment&aggregate_id=tx-4242"},
		{"list_error", "/api/v1/events?status=FAILED&error=503"},
		{"list_event_type_created", "/api/v1/events?event_type=ApprovalRequested&created_after=" +
			time.Now().Add(-10*time.Minute).UTC().Format(time.RFC3339)},
		{"detail", "/api/v1/events/" + someID},
		{"detail_failed", "/api/v1/events/" + failedID},
		{"overview_api", "/api/v1/stats"},
		{"overview_page", "/"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				req, _ := http.NewRequest("GET", c.path, nil)
				req.Header.Set("Authorization", "Bearer "+viewerToken)
				w := &discardWriter{header: http.Header{}}
				t0 := time.Now()
				h.ServeHTTP(w, req)
				lat = append(lat, time.Since(t0))
				if w.status != 0 && w.status != 200 {
					b.Fatalf("%s: status %d", c.path, w.status)
				}
			}
			slices.Sort(lat)
			p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(p(0.50), "p50-ms")
			b.ReportMetric(p(0.95), "p95-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(s int)           { w.status = s }
