package sqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/sqlite"
)

func TestClaimValidation(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	if _, err := e.store.Claim(ctx, store.ClaimRequest{RelayID: "test-relay", Limit: 0, Lease: time.Minute}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("limit 0: %v", err)
	}
	if _, err := e.store.Claim(ctx, store.ClaimRequest{RelayID: "test-relay", Limit: 1}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("lease 0: %v", err)
	}
	c := e.claim(t, 10, time.Minute, true)
	if len(c.Events) != 0 || c.Token == "" || !c.DBTime.IsZero() {
		t.Errorf("empty claim = %+v", c)
	}
}

func TestClaimOrderAndExclusivity(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	// A1 B1 A2 B2 A3 C1 in id order.
	ids := e.enqueue(t, ev("A", 1), ev("B", 1), ev("A", 2), ev("B", 2), ev("A", 3), ev("C", 1))
	a1, b1, a2, b2, a3, c1 := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]

	// The window is the first 3 due rows: A1 B1 A2, so aggregates A and B
	// with a fair share of 2 rows each (A1 A2, B1 B2); every head comes
	// before any second row, so the limit of 3 takes A1 B1 A2.
	first := e.claim(t, 3, time.Minute, true)
	if !sameIDs(eventIDs(first), []outbox.EventID{a1, b1, a2}) {
		t.Fatalf("first claim = %v, want A1 B1 A2", eventIDs(first))
	}
	// The claim holds its rows as long as its lanes' leases, taken for a
	// minute on the database clock just before the claim read them.
	if lease := first.LockedUntil.Sub(first.DBTime); first.DBTime.IsZero() || lease <= 0 || lease > time.Minute {
		t.Errorf("claim times: db %v, locked until %v; want a lease of at most a minute on the database clock", first.DBTime, first.LockedUntil)
	}
	for _, ev := range first.Events {
		r := e.get(t, ev.EventID)
		if r.Status != outbox.StatusProcessing || r.LockToken != first.Token || !r.LockedUntil.Equal(first.LockedUntil) {
			t.Errorf("claimed row %d = %s token %q until %v", r.ID, r.Status, r.LockToken, r.LockedUntil)
		}
	}

	// The second claim cannot take A3 or B2: earlier events of their
	// aggregates are PROCESSING. It takes C1.
	second := e.claim(t, 100, time.Minute, true)
	if !sameIDs(eventIDs(second), []outbox.EventID{c1}) {
		t.Fatalf("second claim = %v, want C1 only: A3 and B2 wait behind events in flight", eventIDs(second))
	}
	if second.Token == first.Token {
		t.Fatal("two claims share a token")
	}
	// Once A1 and A2 are delivered and B1 retried, A3 is A's head.
	outs := outcomes(first, store.Delivered)
	outs[1].Kind, outs[1].RetryIn, outs[1].Error = store.Retry, time.Hour, "HTTP 503"
	res := e.complete(t, first, true, outs)
	if len(res.Applied) != 3 || len(res.Fenced) != 0 {
		t.Fatalf("complete = %+v", res)
	}
	third := e.claim(t, 100, time.Minute, true)
	if !sameIDs(eventIDs(third), []outbox.EventID{a3}) {
		t.Fatalf("third claim = %v, want A3 only (B1 waits an hour, B2 behind it)", eventIDs(third))
	}
	// B2's available_at was pushed back with B1's.
	if r1, r2 := e.get(t, b1), e.get(t, b2); !r2.AvailableAt.Equal(r1.AvailableAt) {
		t.Errorf("B2 available_at = %v, want B1's %v", r2.AvailableAt, r1.AvailableAt)
	}
}

func TestClaimRunOfOneAggregate(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	var evs []outbox.Event
	for i := 0; i < 5; i++ {
		evs = append(evs, ev("one", i))
	}
	ids := e.enqueue(t, evs...)
	c := e.claim(t, 10, time.Minute, true)
	if !sameIDs(eventIDs(c), ids) {
		t.Fatalf("claim = %v, want all five events of the aggregate in one claim, in id order", eventIDs(c))
	}
	for i := 1; i < len(c.Events); i++ {
		if c.Events[i].ID <= c.Events[i-1].ID {
			t.Fatalf("events not in id order: %v", eventIDs(c))
		}
	}
	// A limit below the run: the run's first rows.
	e2 := newEnv(t, sqlite.Config{})
	ids2 := e2.enqueue(t, evs...)
	c2 := e2.claim(t, 2, time.Minute, true)
	if !sameIDs(eventIDs(c2), ids2[:2]) {
		t.Fatalf("claim of 2 = %v, want the first two", eventIDs(c2))
	}
	if c := e2.claim(t, 10, time.Minute, true); len(c.Events) != 0 {
		t.Fatalf("claim while the head is in flight = %v, want nothing", eventIDs(c))
	}
}

func TestClaimDelayedHead(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	delayed := ev("G", 1)
	delayed.Delay = time.Hour
	ids := e.enqueue(t, delayed, ev("G", 2), ev("H", 1))
	// G1 is not due, so G2 is not G's head: G waits, H goes.
	c := e.claim(t, 10, time.Minute, true)
	if !sameIDs(eventIDs(c), []outbox.EventID{ids[2]}) {
		t.Fatalf("claim = %v, want H1 only", eventIDs(c))
	}
	// G2 now waits with G1, out of the window.
	if g1, g2 := e.get(t, ids[0]), e.get(t, ids[1]); !g2.AvailableAt.Equal(g1.AvailableAt) || g2.Status != outbox.StatusPending {
		t.Errorf("G2 = %s available %v, want PENDING at G1's %v", g2.Status, g2.AvailableAt, g1.AvailableAt)
	}
}

// Events enqueued behind a head in backoff must not fill the claim window
// and starve other aggregates.
func TestClaimNoStarvationBehindRetriedHead(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	s1 := e.enqueue(t, ev("S", 1))[0]
	c := e.claim(t, 10, time.Minute, true)
	outs := outcomes(c, store.Retry)
	outs[0].RetryIn = time.Hour
	e.complete(t, c, true, outs)
	// Enqueued after the retry, so the completion could not push them back.
	later := e.enqueue(t, ev("S", 2), ev("S", 3))
	t1 := e.enqueue(t, ev("T", 1))[0]

	// The window (2) holds S2 and S3 only: nothing is claimable, but S2 is
	// moved behind S1.
	if c := e.claim(t, 2, time.Minute, true); len(c.Events) != 0 {
		t.Fatalf("first claim = %v, want nothing", eventIDs(c))
	}
	head := e.get(t, s1)
	if r := e.get(t, later[0]); !r.AvailableAt.Equal(head.AvailableAt) {
		t.Fatalf("S2 available %v, want S1's %v", r.AvailableAt, head.AvailableAt)
	}
	// Now T1 gets in.
	if c := e.claim(t, 2, time.Minute, true); !sameIDs(eventIDs(c), []outbox.EventID{t1}) {
		t.Fatalf("second claim = %v, want T1", eventIDs(c))
	}
	if r := e.get(t, later[1]); r.Status != outbox.StatusPending {
		t.Fatalf("S3 = %s", r.Status)
	}
}

// A claim takes every aggregate's head before any aggregate's second event,
// and gives each aggregate at most a fair share of the limit.
func TestClaimFairShare(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ids := e.enqueue(t, ev("A", 1), ev("A", 2), ev("B", 1), ev("B", 2), ev("C", 1))
	a1, a2, b1 := ids[0], ids[1], ids[2]
	// Window A1 A2 B1: aggregates A and B, two rows each at most; heads first.
	c := e.claim(t, 3, time.Minute, true)
	if !sameIDs(eventIDs(c), []outbox.EventID{a1, a2, b1}) {
		t.Fatalf("claim = %v, want A1 A2 B1 (A1 and B1, then A2)", eventIDs(c))
	}

	e2 := newEnv(t, sqlite.Config{})
	ids = e2.enqueue(t, ev("A", 1), ev("B", 1), ev("A", 2), ev("A", 3), ev("A", 4), ev("C", 1))
	// Window A1 B1 A2 A3: A gets 2 of the 4, B its one event.
	c = e2.claim(t, 4, time.Minute, true)
	if !sameIDs(eventIDs(c), []outbox.EventID{ids[0], ids[1], ids[2]}) {
		t.Fatalf("claim = %v, want A1 B1 A2", eventIDs(c))
	}
}

// A relay that holds no lanes gives way to a busy write lock (its claim
// comes back empty, as an idle poll's would) only for a while: one and a
// half balance intervals after the first claim that gave way, its claims
// wait for the lock. Were it to give way every time, a lock that is never
// free for long (a busy producer, several relays sweeping every 50 ms)
// would keep it from ever taking a lane, and nothing would be delivered:
// several relays could claim for minutes with none holding a lane.
func TestClaimWithoutLanesStopsGivingWay(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	ids := e.enqueue(t, ev("hold", 1))
	// BEGIN IMMEDIATE: the producer holds the write lock until the end.
	tx, err := e.app.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// A 1-minute lease: balance every second, give way for 1.5 s.
	req := store.ClaimRequest{RelayID: "lockwait-relay", Limit: 10, Lease: time.Minute}
	gaveWay := 0
	var waitErr error
	wait.For(t, time.Minute, "a claim that waits for the write lock rather than give way", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		c, err := e.store.Claim(cctx, req)
		if err != nil {
			waitErr = err
			return true
		}
		if len(c.Events) != 0 {
			t.Fatalf("claimed %d events while the producer held the write lock", len(c.Events))
		}
		gaveWay++
		return false
	})
	if !errors.Is(waitErr, context.DeadlineExceeded) && !sqlite.IsBusy(waitErr) {
		t.Fatalf("the claim that waited: %v; want its context's end or SQLITE_BUSY", waitErr)
	}
	if gaveWay == 0 {
		t.Fatal("the first claim waited; want it to give way (an empty claim) while the lock was first busy")
	}
	t.Logf("%d claims gave way, then one waited: %v", gaveWay, waitErr)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	c, err := e.store.Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Events) != 1 || c.Events[0].EventID != ids[0] {
		t.Fatalf("claim after the commit returned %d events; want the one event", len(c.Events))
	}
}

// A relay whose lanes have gone unrenewed for longer than it may give way
// to a busy lock (one and a half balance intervals) waits for the write
// lock to renew them: a balance that gave way each time would let its
// leases run out, and a lock that is never free for long would keep it
// from ever renewing them.
func TestBalanceOfStaleLanesWaitsForTheWriteLock(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	const relayID = "stale-lanes-relay"
	const lease = 2 * time.Second // balance every 500 ms; give way up to 750 ms after
	if err := e.store.BalanceLanes(ctx, relayID, lease); err != nil {
		t.Fatal(err)
	}
	balanced := time.Now()
	if len(e.store.HeldLanes(relayID)) == 0 {
		t.Fatal("the relay took no lane")
	}
	leaseEnd := func() int64 {
		var ms int64
		if err := e.app.QueryRowContext(ctx, `SELECT COALESCE(MAX(lease_until_ms), 0) FROM "`+store.DefaultTable+`_lanes" WHERE owner = ?`,
			relayID).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	before := leaseEnd()
	<-time.After(time.Until(balanced.Add(time.Second))) // past the time it may give way
	// BEGIN IMMEDIATE: the producer holds the write lock.
	tx, err := e.app.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	done := make(chan error, 1)
	go func() { done <- e.store.BalanceLanes(ctx, relayID, lease) }()
	// The producer holds the lock until the balance returns, or for two
	// seconds.
	var balanceErr error
	returned := false
	select {
	case balanceErr = <-done:
		returned = true
	case <-time.After(2 * time.Second):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if !returned {
		balanceErr = <-done
	}
	if balanceErr != nil {
		t.Fatal(balanceErr)
	}
	if after := leaseEnd(); after <= before {
		t.Fatalf("the relay's leases end at %d ms, as before the balance (returned while the producer held the lock: %v); "+
			"want them renewed once the lock was free", after, returned)
	}
}

// While the application holds the write lock, a claim claims nothing: it
// waits for the lock and gives up when its context ends, or (a relay
// without lanes, at first: TestClaimWithoutLanesStopsGivingWay) gives way
// at once. Afterwards the store works normally (no connection was left
// inside a transaction).
func TestClaimWaitsForTheWriteLock(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	ids := e.enqueue(t, ev("w", 1))
	tx, err := e.app.BeginTx(ctx, nil) // BEGIN IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Enqueue(ctx, tx, ev("w", 2)); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	c, err := e.store.Claim(short, store.ClaimRequest{RelayID: "test-relay", Limit: 10, Lease: time.Minute})
	cancel()
	if err == nil && len(c.Events) > 0 {
		t.Fatalf("claimed %d events while another connection held the write lock", len(c.Events))
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("claim gave up after %s; want soon after its context ended", waited)
	}
	// Reads do not wait for the writer (WAL).
	if _, err := e.store.Stats(ctx, true); err != nil {
		t.Fatalf("stats while a writer is active: %v", err)
	}
	done := make(chan *store.Claim, 1)
	go func() {
		c, err := e.store.Claim(ctx, store.ClaimRequest{RelayID: "test-relay", Limit: 10, Lease: time.Minute})
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	c = <-done
	if c != nil && len(c.Events) == 0 {
		// It gave way while the lock was still held; the lock is free now.
		c = e.claim(t, 10, time.Minute, true)
	}
	if c == nil || len(c.Events) != 2 || c.Events[0].EventID != ids[0] {
		t.Fatalf("claim after the commit = %+v", c)
	}
	if res := e.complete(t, c, true, outcomes(c, store.Delivered)); len(res.Applied) != 2 {
		t.Fatalf("complete = %+v", res)
	}
}
