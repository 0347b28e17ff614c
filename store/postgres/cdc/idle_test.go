package cdc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store/postgres/cdc"
)

// An idle outbox holds no WAL: while another table takes 64 MB of writes,
// in 4 MB chunks, the keepalives move the slot on past each chunk, and its
// lag stays under 16 MB. The lag
// is measured against the whole server's WAL, so the test runs on a
// private cluster: on the shared server, other tests' writes (another copy
// of the suite, say) add to it.
func TestIdleOutboxSlotFollowsOtherWrites(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartPostgresCluster(t)
	h := newHarnessOn(t, cluster.DSN())
	src := h.source(t, cdcConfig())
	_, _ = runRelay(t, src, &relaytest.Recorder{}, relay.Config{})
	eventually(t, 30*time.Second, "the relay to stream", src.Streaming)
	ctx := context.Background()
	other := fmt.Sprintf("%q", h.table+"_other") // dropped with the outbox's tables
	if _, err := h.pool.Exec(ctx, `CREATE TABLE `+other+` (id bigint PRIMARY KEY, body text)`); err != nil {
		t.Fatal(err)
	}
	var startLSN, endLSN string
	if err := h.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&startLSN); err != nil {
		t.Fatal(err)
	}
	const chunks, rowsPerChunk = 16, 4000 // about 4 MB of WAL a chunk
	worst := int64(0)
	for c := 0; c < chunks; c++ {
		var before string
		if err := h.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		if _, err := h.pool.Exec(ctx, `INSERT INTO `+other+` SELECT g, repeat(md5(g::text), 30) FROM generate_series($1::bigint, $2::bigint) g`,
			c*rowsPerChunk, (c+1)*rowsPerChunk-1); err != nil {
			t.Fatal(err)
		}
		l, err := cdc.Lag(ctx, h.pool, h.slot)
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, l.Bytes)
		// The slot follows each chunk: it passes where the chunk began
		// before the next one is written. Without the keepalive advance
		// it never moves, and this wait fails; with it, how far behind the
		// slot is depends on how fast the server writes (a private cluster
		// writes 4 MB in a few milliseconds), so the writes wait for it.
		eventually(t, 30*time.Second, fmt.Sprintf("the slot to pass chunk %d's start", c), func() bool {
			var passed bool
			err := h.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, h.slot, before).Scan(&passed)
			return err == nil && passed
		})
	}
	var written int64
	if err := h.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, startLSN).Scan(&endLSN, &written); err != nil {
		t.Fatal(err)
	}
	if written < 64<<20 {
		t.Fatalf("the other table's writes made %d bytes of WAL, want at least 64 MB", written)
	}
	const bound = 16 << 20
	if worst >= bound {
		t.Errorf("slot lag reached %d bytes while the outbox was idle, want under %d", worst, bound)
	}
	// And it catches up to the end of those writes.
	eventually(t, 30*time.Second, "the slot to pass the other table's writes", func() bool {
		var passed bool
		err := h.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, h.slot, endLSN).Scan(&passed)
		return err == nil && passed
	})
	t.Logf("%d MB of other writes; worst slot lag %d KB", written>>20, worst>>10)
}
