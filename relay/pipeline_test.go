package relay

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store"
)

// A claim waits while MaxBatchesInFlight batches are in flight, and not
// while fewer are.
func TestWaitSlotKeepsTheInFlightLimit(t *testing.T) {
	p := &pipeline{r: &Relay{cfg: Config{MaxBatchesInFlight: 2}}, inFlight: map[string]bool{"a": true}, slot: make(chan struct{}, 1)}
	if !p.waitSlot(context.Background()) {
		t.Fatal("one batch of two in flight: the next claim must not wait")
	}
	p.inFlight["b"] = true
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a waiting claim returns false when ctx ends
	if p.waitSlot(ctx) {
		t.Fatal("two batches of two in flight: a third claim went ahead")
	}
}

// claimDeadlineStore records the deadline of the context Claim gets.
type claimDeadlineStore struct {
	featuresOnly
	deadline time.Time
}

func (s *claimDeadlineStore) Claim(ctx context.Context, _ store.ClaimRequest) (*store.Claim, error) {
	s.deadline, _ = ctx.Deadline()
	return &store.Claim{}, nil
}

// A claim gets half the lease: one that takes longer could hand over rows
// whose lease is mostly gone.
func TestClaimGetsHalfTheLease(t *testing.T) {
	s := &claimDeadlineStore{}
	r, err := New(Config{Store: s, Sink: nopSink{}, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := &pipeline{r: r, inFlight: map[string]bool{}}
	before := time.Now()
	if b, err := p.claim(context.Background()); b != nil || err != nil {
		t.Fatalf("claim = %v, %v; want nothing", b, err)
	}
	after := time.Now()
	if s.deadline.Before(before.Add(5*time.Second)) || s.deadline.After(after.Add(5*time.Second)) {
		t.Fatalf("the claim's deadline is %v after the call, want half the 10s lease", s.deadline.Sub(before))
	}
}

// The drain asks whether it is done at most once a drainCheckEvery, and
// never while a batch is in flight.
func TestDrainCheckIsPaced(t *testing.T) {
	p := &pipeline{r: &Relay{}, inFlight: map[string]bool{}}
	if !p.drainCheckDue() {
		t.Fatal("the first check of a drain did not run")
	}
	if p.drainCheckDue() {
		t.Fatal("a second check ran right after the first")
	}
	p.lastDrainCheck = time.Now().Add(-drainCheckEvery - time.Millisecond)
	p.claimed = 1 // a batch claimed, not yet recorded
	if p.drainCheckDue() {
		t.Fatal("a check ran while a batch was in flight")
	}
	p.recorded = 1
	if !p.drainCheckDue() {
		t.Fatalf("no check %s after the last, with nothing in flight", drainCheckEvery)
	}
}
