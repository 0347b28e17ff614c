package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/postgres"
)

// TestTruncateRestartIdentityResetsTheCursors: the lanes' cursors assume
// ids only grow. After TRUNCATE ... RESTART IDENTITY the ids start again
// below them, so the truncate trigger ends the leases and resets the
// cursors, and a relay that was claiming delivers the new events (ids 1,
// 2, 3 ...) instead of skipping them.
func TestTruncateRestartIdentityResetsTheCursors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, table := newTable(t, postgres.Config{})
	const relayID = "relay-truncate"
	drain := func(want int) {
		t.Helper()
		got := 0
		wait.Until(t, 30*time.Second, fmt.Sprintf("%d events claimed and delivered", want), func() (bool, error) {
			c, err := s.Claim(ctx, store.ClaimRequest{RelayID: relayID, Limit: 100, Lease: time.Minute, FailedBlocks: true})
			if err != nil {
				return false, err
			}
			if len(c.Events) == 0 {
				return got >= want, nil
			}
			res, err := s.Complete(ctx, delivered(c))
			if err != nil {
				return false, err
			}
			got += len(res.Applied)
			return false, nil
		})
		if got != want {
			t.Fatalf("delivered %d events, want %d", got, want)
		}
	}
	for i := range 40 {
		enqueueWith(t, s, event(fmt.Sprint("agg-", i%8)))
	}
	// Claims until every cursor has passed the 40 rows: the horizon
	// settles once the transactions around the claims have ended.
	drain(40)
	wait.Until(t, 30*time.Second, "the lane cursors past the delivered rows", func() (bool, error) {
		if _, err := s.Claim(ctx, store.ClaimRequest{RelayID: relayID, Limit: 100, Lease: time.Minute}); err != nil {
			return false, err
		}
		if err := s.BalanceLanes(ctx, relayID, time.Minute); err != nil { // stores the cursors
			return false, err
		}
		var behind int
		err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM "`+table+`_lanes" WHERE next_id <= 40`).Scan(&behind)
		return behind == 0, err
	})

	if _, err := s.Pool().Exec(ctx, `TRUNCATE "`+table+`" RESTART IDENTITY`); err != nil {
		t.Fatal(err)
	}
	var leased int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM "`+table+`_lanes" WHERE owner IS NOT NULL OR next_id <> 0`).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != 0 {
		t.Fatalf("%d lanes still leased or with a cursor after the truncate", leased)
	}
	for i := range 10 {
		enqueueWith(t, s, event(fmt.Sprint("agg-", i%8)))
	}
	drain(10)
}
