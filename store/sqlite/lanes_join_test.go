package sqlite_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/sqlite"
)

// A relay that joins gets its share of the lanes from a relay that always
// has batches in flight on all of them: the busy relay stops claiming from
// the lanes it is giving up, and releases them once their batches are
// recorded, while its batches on the lanes it keeps are still out. A
// relay that gave up only idle lanes would never give one up under load.
func TestJoiningRelayGetsItsShareFromABusyOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	const lease = time.Minute
	const aggregates = 640 // about ten per lane: every lane has work
	var events []outbox.Event
	for a := 0; a < aggregates; a++ {
		for n := 1; n <= 3; n++ {
			events = append(events, ev(fmt.Sprint("busy-", a), n))
		}
	}
	e.enqueue(t, events...)
	balance := func(relay string) {
		t.Helper()
		if err := e.store.BalanceLanes(ctx, relay, lease); err != nil {
			t.Fatal(err)
		}
	}
	claim := func() *store.Claim {
		t.Helper()
		c, err := e.store.Claim(ctx, store.ClaimRequest{RelayID: "a", Limit: aggregates, Lease: lease, FailedBlocks: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Events) == 0 {
			t.Fatal("relay a claimed nothing")
		}
		return c
	}
	complete := func(c *store.Claim) {
		t.Helper()
		res, err := e.store.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "a", FailedBlocks: true,
			Outcomes: outcomes(c, store.Delivered)})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Fenced) != 0 || len(res.Applied) != len(c.Events) {
			t.Fatalf("relay a's batch of %d: %d applied, %d fenced; want every one applied", len(c.Events), len(res.Applied), len(res.Fenced))
		}
	}
	laneOf := e.lanesOf(t)

	balance("a") // the first relay takes every lane
	if n := len(e.store.HeldLanes("a")); n != 64 {
		t.Fatalf("relay a holds %d lanes, want 64", n)
	}
	first := claim()
	balance("b") // b joins: every lane is held
	balance("a") // a is 32 above its share, and every lane of it is busy
	second := claim()
	held := e.store.HeldLanes("a")
	lanesOfSecond := map[int]bool{}
	for _, ev := range second.Events {
		lanesOfSecond[laneOf[ev.ID]] = true
	}
	if len(lanesOfSecond) > 32 {
		t.Fatalf("relay a's second batch spans %d lanes: it went on claiming from the lanes it is giving up", len(lanesOfSecond))
	}
	complete(first)
	balance("b")
	balance("a") // the lanes given up have nothing in flight now; the second batch is still out
	balance("b")
	a, b := e.store.HeldLanes("a"), e.store.HeldLanes("b")
	if len(a) != 32 || len(b) != 32 {
		t.Fatalf("relay a holds %d lanes, b %d, with a's second batch in flight; want 32 each", len(a), len(b))
	}
	for l := range lanesOfSecond {
		if _, ok := a[l]; !ok {
			t.Errorf("lane %d of relay a's batch in flight left it (held %v)", l, held[l] != 0)
		}
	}
	complete(second)
}

// Lanes a relay is giving up to a relay that then dies stay claimable: the
// surrender ends at the first balance that finds the joiner gone, even
// while those lanes still had batches in flight, so their events are not
// left with nobody to claim them.
func TestSurrenderEndsWhenTheJoinerDies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	const lease = 8 * time.Second // balance every second: a member is live for 3 s, a lane for 8
	const aggregates = 640
	var events []outbox.Event
	for a := 0; a < aggregates; a++ {
		events = append(events, ev(fmt.Sprint("gone-", a), 1), ev(fmt.Sprint("gone-", a), 2))
	}
	e.enqueue(t, events...)
	lanes := e.lanesOf(t)
	balance := func(relay string) {
		t.Helper()
		if err := e.store.BalanceLanes(ctx, relay, lease); err != nil {
			t.Fatal(err)
		}
	}
	claim := func() *store.Claim {
		t.Helper()
		c, err := e.store.Claim(ctx, store.ClaimRequest{RelayID: "a", Limit: aggregates, Lease: lease, FailedBlocks: true})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	balance("a")
	first := claim() // every aggregate's head, on nearly every lane
	balance("b")
	joined := time.Now()
	balance("a") // a surrenders 32 busy lanes to b
	// b dies: past its liveness (three balance intervals), a balances
	// with its first batch still out.
	<-time.After(time.Until(joined.Add(4 * time.Second)))
	balance("a")
	res, err := e.store.Complete(ctx, store.CompleteRequest{Token: first.Token, RelayID: "a", FailedBlocks: true,
		Outcomes: outcomes(first, store.Delivered)})
	if err != nil || len(res.Applied) != len(first.Events) {
		t.Fatalf("relay a's first batch: %d of %d applied, %v", len(res.Applied), len(first.Events), err)
	}
	second := claim()
	spanned := map[int]bool{}
	for _, ev := range second.Events {
		spanned[lanes[ev.ID]] = true
	}
	if len(second.Events) != aggregates || len(spanned) <= 32 {
		t.Fatalf("after b died, relay a claimed %d of the %d second events, from %d lanes: the lanes it was giving up to b stayed out of its claims",
			len(second.Events), aggregates, len(spanned))
	}
}

// lanesOf maps each row id of the outbox to its lane.
func (e *env) lanesOf(t *testing.T) map[int64]int {
	t.Helper()
	laneOf := map[int64]int{}
	rows, err := e.app.QueryContext(context.Background(), `SELECT id, lane FROM "`+store.DefaultTable+`"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var lane int
		if err := rows.Scan(&id, &lane); err != nil {
			t.Fatal(err)
		}
		laneOf[id] = lane
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return laneOf
}
