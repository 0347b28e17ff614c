package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
)

// TestSweepAnalyzesWhenAutovacuumIsOff: with autovacuum off, the sweeper
// keeps the planner's statistics fresh so that cached claim plans follow
// the table.
func TestSweepAnalyzesWhenAutovacuumIsOff(t *testing.T) {
	s, table := newTable(t, postgres.Config{})
	ctx := context.Background()
	var off bool
	if err := s.Pool().QueryRow(ctx, "SELECT current_setting('autovacuum') = 'off'").Scan(&off); err != nil {
		t.Fatal(err)
	}
	if !off {
		if _, err := s.Pool().Exec(ctx, fmt.Sprintf(`ALTER TABLE %q SET (autovacuum_enabled = false)`, table)); err != nil {
			t.Fatal(err)
		}
	}
	var events []outbox.Event
	for i := 0; i < 200; i++ {
		events = append(events, event(fmt.Sprint("a-", i%7)))
	}
	enqueueWith(t, s, events...)
	// Backends publish their table statistics about once a second, so
	// sweep until the change shows and the table is analyzed.
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := s.Sweep(ctx, store.SweepRequest{FailedBlocks: true}); err != nil {
			t.Fatal(err)
		}
		var analyzed bool
		if err := s.Pool().QueryRow(ctx, `SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relid = $1::regclass`,
			`"`+table+`"`).Scan(&analyzed); err != nil {
			t.Fatal(err)
		}
		if analyzed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("200 new rows with autovacuum off, and the sweeps did not ANALYZE the table")
		}
		tick := time.NewTimer(50 * time.Millisecond)
		<-tick.C
	}
}
