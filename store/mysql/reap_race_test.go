package mysql_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/storetest"
)

// TestClaimCommittedDuringReapIsNotReaped: the sweeper reads the claims
// and the lanes in two statements of a READ COMMITTED transaction. A relay
// whose lanes' lease ended takes them again under new tokens and claims
// between those two reads: its new claim must not be reaped (its events
// would be delivered twice, with no relay having failed). Only the claim
// made under the old tokens is. Read lanes first, the sweeper checked the
// new claim against the lanes as they were before it, and reaped it.
func TestClaimCommittedDuringReapIsNotReaped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	s := newStore(t, db, mysql.Config{})
	h := harnessFor(s, db)
	const relay = "reap-race"

	old := storetest.Enqueue(t, h, storetest.PaymentEvent("reap-race-old", 1))
	var first *store.Claim
	wait.Until(t, time.Minute, "a claim under a 2 s lease to take the first event", func() (bool, error) {
		c, err := s.Claim(ctx, store.ClaimRequest{RelayID: relay, Limit: 10, Lease: 2 * time.Second, FailedBlocks: true})
		first = c
		return err == nil && len(c.Events) == 1, err
	})
	wait.Until(t, time.Minute, "the relay's lane leases to end on the database's clock", func() (bool, error) {
		var ended bool
		err := db.QueryRowContext(ctx, "SELECT MAX(lease_until_ms) < UNIX_TIMESTAMP(NOW(3)) * 1000 FROM `"+s.Table()+"_lanes`").Scan(&ended)
		return ended, err
	})
	fresh := storetest.Enqueue(t, h, storetest.PaymentEvent("reap-race-new", 1))

	var (
		once   sync.Once
		second *store.Claim
		err2   error
	)
	s.BetweenReapReads(func() {
		once.Do(func() {
			// The relay comes back: it takes its lanes again under new
			// tokens and claims the new event (the old one is still held
			// by the first claim's row).
			second, err2 = s.Claim(ctx, store.ClaimRequest{RelayID: relay, Limit: 10, Lease: time.Minute, FailedBlocks: true})
		})
	})
	res, err := s.Sweep(ctx, store.SweepRequest{RelayID: "sweeper", FailedBlocks: true})
	if err != nil {
		t.Fatal(err)
	}
	if err2 != nil {
		t.Fatal(err2)
	}
	if second == nil || len(second.Events) != 1 || second.Events[0].EventID != fresh[0] {
		t.Fatalf("the claim between the sweeper's reads took %v, want the new event %s", second, fresh[0])
	}
	if res.Reaped != 1 {
		t.Fatalf("the sweep reaped %d rows, want 1: the first claim's event (its lanes were taken again), not the new claim's", res.Reaped)
	}
	if c := completeDelivered(t, s, second); len(c.Applied) != 1 {
		t.Fatalf("the new claim's completion = %+v, want applied: the sweeper reaped a live claim", c)
	}
	if c := completeDelivered(t, s, first); len(c.Applied) != 0 {
		t.Fatalf("the first claim's completion = %+v, want fenced (event %s)", c, old[0])
	}
}

// completeDelivered completes every event of c as delivered.
func completeDelivered(t *testing.T, s *mysql.Store, c *store.Claim) store.CompleteResult {
	t.Helper()
	outs := make([]store.Outcome, len(c.Events))
	for i, e := range c.Events {
		outs[i] = store.Outcome{ID: e.ID, EventID: e.EventID, Kind: store.Delivered, Attempt: e.Attempt, Attempted: true,
			StartedAt: c.DBTime, FinishedAt: c.DBTime}
	}
	res, err := s.Complete(context.Background(), store.CompleteRequest{Token: c.Token, RelayID: "reap-race", FailedBlocks: true, Outcomes: outs})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
