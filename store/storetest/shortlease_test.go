package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store"
)

// leaseHungry is a store whose claims come back empty under a lease
// shorter than need, as a loaded database's do under a short one.
type leaseHungry struct {
	store.Store // only Claim is called
	need        time.Duration
	leases      []time.Duration
}

func (s *leaseHungry) Claim(_ context.Context, req store.ClaimRequest) (*store.Claim, error) {
	s.leases = append(s.leases, req.Lease)
	if req.Lease < s.need {
		return &store.Claim{}, nil
	}
	return &store.Claim{Events: []store.Claimed{{}}}, nil
}

// TestClaimShortLeaseGrows: empty claims double the lease step by step, up
// to the cap, and the caller's request says which lease the claim took.
func TestClaimShortLeaseGrows(t *testing.T) {
	defer func(step time.Duration) { shortLeaseStep = step }(shortLeaseStep)
	shortLeaseStep = 50 * time.Millisecond
	s := &leaseHungry{need: 4 * time.Second}
	req := store.ClaimRequest{RelayID: "test", Limit: 10, Lease: time.Second}
	if c := claimShortLease(t, s, &req, 1); len(c.Events) != 1 {
		t.Fatalf("claim = %+v, want the event", c)
	}
	if req.Lease != 4*time.Second {
		t.Errorf("the request's lease is %s after the claim, want the 4s it was made under", req.Lease)
	}
	if first := s.leases[0]; first != time.Second {
		t.Errorf("the first claim's lease was %s, want the caller's 1s", first)
	}
	for i := 1; i < len(s.leases); i++ {
		if s.leases[i] != s.leases[i-1] && s.leases[i] != 2*s.leases[i-1] {
			t.Fatalf("leases %v: each step must double", s.leases)
		}
	}
}
