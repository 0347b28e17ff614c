package storetest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// claimWith claims with the given request fields on top of the suite's defaults.
func claimWith(t testing.TB, s store.Store, req store.ClaimRequest) *store.Claim {
	t.Helper()
	req.RelayID, req.Lease, req.FailedBlocks = "test", time.Minute, true
	c, err := s.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return c
}

// claimedAggregates returns the aggregate ids of a claim, sorted.
func claimedAggregates(c *store.Claim) []string {
	out := make([]string, len(c.Events))
	for i, e := range c.Events {
		out[i] = e.AggregateID
	}
	sort.Strings(out)
	return out
}

func names(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%03d", prefix, i))
	}
	sort.Strings(out)
	return out
}

// DeadlineEvent is an event of its own aggregate with a TTL.
func DeadlineEvent(aggregateID string, ttl time.Duration) outbox.Event {
	e := PaymentEvent(aggregateID, 1)
	e.TTL = ttl
	return e
}

// testEDFClaimShare: a claim takes its FIFO share of the oldest events in
// id order and the rest by nearest deadline; strict FIFO and other shares
// do what they say.
func testEDFClaimShare(t *testing.T, h *Harness) {
	var fifo, edf []outbox.Event
	for i := range 60 {
		fifo = append(fifo, PaymentEvent(fmt.Sprintf("fifo-%03d", i), 1))
	}
	Enqueue(t, h, fifo...)
	// Enqueued latest-deadline first, so that id order is not deadline order.
	for i := 29; i >= 0; i-- {
		edf = append(edf, DeadlineEvent(fmt.Sprintf("edf-%03d", i), time.Hour+time.Duration(i)*time.Second))
	}
	Enqueue(t, h, edf...)

	c := claimWith(t, h.Store, store.ClaimRequest{Limit: 20})
	want := append(names("edf", 0, 10), names("fifo", 0, 10)...)
	if got := claimedAggregates(c); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("default claim of 20 took %v\nwant the 10 oldest and the 10 nearest deadlines %v", got, want)
	}
	c = claimWith(t, h.Store, store.ClaimRequest{Limit: 20, StrictFIFO: true})
	if got, want := claimedAggregates(c), names("fifo", 10, 30); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("strict FIFO claim of 20 took %v, want %v", got, want)
	}
	c = claimWith(t, h.Store, store.ClaimRequest{Limit: 20, FIFOShare: 0.25})
	want = append(names("edf", 10, 25), names("fifo", 30, 35)...)
	if got := claimedAggregates(c); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("claim of 20 with a FIFO share of 0.25 took %v, want %v", got, want)
	}
	// Fewer deadline events than slots: the rest of the claim is FIFO.
	c = claimWith(t, h.Store, store.ClaimRequest{Limit: 20})
	want = append(names("edf", 25, 30), names("fifo", 35, 50)...)
	sort.Strings(want)
	if got := claimedAggregates(c); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("claim of 20 with 5 deadline events left took %v, want %v", got, want)
	}
	if _, err := h.Store.Claim(context.Background(), store.ClaimRequest{RelayID: "t", Limit: 5, Lease: time.Minute, FIFOShare: 1.5}); err == nil ||
		!strings.Contains(err.Error(), "FIFO share") {
		t.Errorf("a FIFO share of 1.5 gave %v, want an error naming the FIFO share", err)
	}
}

// testEDFKeepsAggregateOrder: an aggregate whose later event has the
// nearest deadline is preferred, but only through its head: the deadline
// event never goes before the earlier events of its aggregate.
func testEDFKeepsAggregateOrder(t *testing.T, h *Harness) {
	var backlog []outbox.Event
	for i := range 30 {
		backlog = append(backlog, PaymentEvent(fmt.Sprintf("fifo-%03d", i), 1))
	}
	Enqueue(t, h, backlog...)
	// ord: a head without a deadline, then a second head-less event, then
	// the one with the nearest deadline of all.
	Enqueue(t, h, PaymentEvent("ord", 1), PaymentEvent("ord", 2), DeadlineEvent("ord", time.Hour))
	c := claimWith(t, h.Store, store.ClaimRequest{Limit: 4})
	var ord []int64
	for _, e := range c.Events {
		if e.AggregateID == "ord" {
			ord = append(ord, e.ID)
		}
	}
	got := claimedAggregates(c)
	if len(ord) == 0 || !strings.Contains(strings.Join(got, ","), "fifo-000,fifo-001") {
		t.Fatalf("claim of 4 took %v: want fifo-000, fifo-001 and the head of ord (its later event has the nearest deadline)", got)
	}
	rec, err := h.Store.ListEvents(context.Background(), store.ListFilter{AggregateType: "payment", AggregateID: "ord"})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(rec, func(i, j int) bool { return rec[i].ID < rec[j].ID })
	for i, id := range ord {
		if id != rec[i].ID {
			t.Fatalf("claimed ord rows %v, want a prefix of its rows in id order (%d, %d, %d)", ord, rec[0].ID, rec[1].ID, rec[2].ID)
		}
	}
}

// testEDFFairness: under a constant stream of events with near deadlines,
// events without one still get their share of every claim (the documented
// bound: store.DefaultFIFOShare of each claim).
func testEDFFairness(t *testing.T, h *Harness) {
	var backlog []outbox.Event
	for i := range 100 {
		backlog = append(backlog, PaymentEvent(fmt.Sprintf("fifo-%03d", i), 1))
	}
	Enqueue(t, h, backlog...)
	const limit = 20
	minShare := int(float64(limit) * store.DefaultFIFOShare)
	for round := range 8 {
		// More deadline events than a claim can take arrive every round.
		var stream []outbox.Event
		for i := range limit * 2 {
			stream = append(stream, DeadlineEvent(fmt.Sprintf("qr-%d-%02d", round, i), time.Minute))
		}
		Enqueue(t, h, stream...)
		c := claimWith(t, h.Store, store.ClaimRequest{Limit: limit})
		n := 0
		for _, e := range c.Events {
			if strings.HasPrefix(e.AggregateID, "fifo-") {
				n++
			}
		}
		if len(c.Events) != limit || n < minShare {
			t.Fatalf("round %d: claim took %d events, %d without a deadline; want %d, at least %d without", round, len(c.Events), n, limit, minShare)
		}
		complete(t, h.Store, c, true, outcomes(c, store.Delivered))
	}
}
