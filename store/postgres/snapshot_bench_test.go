package postgres_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
	"github.com/txoutbox/outbox/store/storetest"
)

// BenchmarkSnapshot measures the gauge query on a table of 1,000,000
// PROCESSED rows and 10,000 PENDING ones (OUTBOX_BENCH_PROCESSED and
// OUTBOX_BENCH_PENDING change the sizes), plus 10 FAILED heads with a
// waiting event each:
//
//	go test -run '^$' -bench Snapshot -benchtime 20x ./store/postgres/
//
// "gauges" is what the gauge refresher reads every interval; "full" adds
// the PROCESSED/EXPIRED/SKIPPED counts and the oldest pending age (a scan
// of the table; the refresher reads it every 20 intervals, `outbox status`
// every time); "stats" is Store.Stats, for comparison.
func BenchmarkSnapshot(b *testing.B) {
	processed, pending := envInt("OUTBOX_BENCH_PROCESSED", 1_000_000), envInt("OUTBOX_BENCH_PENDING", 10_000)
	ctx := context.Background()
	pool := newPool(b)
	s, err := postgres.New(pool, postgres.Config{Table: storetest.TableName("snapbench")})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.MigrateUp(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = s.MigrateDown(ctx)
		_, _ = pool.Exec(ctx, `DROP TABLE IF EXISTS "`+s.Tables().Migrations+`"`)
	})
	t := `"` + s.Table() + `"`
	fill := []string{
		`INSERT INTO ` + t + ` (event_id, aggregate_type, aggregate_id, event_type, payload, status, processed_at, created_at, available_at)
		 SELECT gen_random_uuid(), 'payment', 'tx-' || (g % 50000), 'ApprovalRequested', '{"transaction_no":"tx-1001","amount":15000}',
		        'PROCESSED', now() - interval '1 minute', now() - interval '1 hour', now() - interval '1 hour'
		 FROM generate_series(1, ` + strconv.Itoa(processed) + `) g`,
		`INSERT INTO ` + t + ` (event_id, aggregate_type, aggregate_id, event_type, payload)
		 SELECT gen_random_uuid(), 'payment', 'p-' || g, 'ApprovalRequested', '{}' FROM generate_series(1, ` + strconv.Itoa(pending) + `) g`,
		`INSERT INTO ` + t + ` (event_id, aggregate_type, aggregate_id, event_type, payload, status)
		 SELECT gen_random_uuid(), 'payment', 'poison-' || g, 'ApprovalRequested', '{}', s
		 FROM generate_series(1, 10) g, unnest(ARRAY['FAILED', 'BLOCKED']) s`,
		`VACUUM ANALYZE ` + t,
	}
	for _, q := range fill {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	cases := []struct {
		name string
		run  func() error
	}{
		{"gauges", func() error {
			_, err := s.Snapshot(ctx, store.SnapshotRequest{FailedBlocks: true})
			return err
		}},
		{"full", func() error {
			_, err := s.Snapshot(ctx, store.SnapshotRequest{FailedBlocks: true, Full: true, BlockedLimit: 100})
			return err
		}},
		{"stats", func() error {
			_, err := s.Stats(ctx, true)
			return err
		}},
	}
	snap, err := s.Snapshot(ctx, store.SnapshotRequest{FailedBlocks: true, Full: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("counts %v, blocked aggregates %d", snap.Counts, snap.BlockedAggregateCount)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
