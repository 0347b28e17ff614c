package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/sqlite"
)

// slowClaimStore is a store whose first claim takes delay to reach the
// database (a pool to wait for, a lock, a loaded server): the database
// reads its clock for the claim that long after the relay sent it.
type slowClaimStore struct {
	*sqlite.Store
	delay time.Duration

	mu      sync.Mutex
	claims  int
	dbTimes []time.Time // DBTime of each claim that took events
}

func (s *slowClaimStore) Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error) {
	s.mu.Lock()
	s.claims++
	first := s.claims == 1
	s.mu.Unlock()
	if first {
		<-time.After(s.delay) // the claim's way to the database, not a synchronization
	}
	c, err := s.Store.Claim(ctx, req)
	if err == nil && len(c.Events) > 0 {
		s.mu.Lock()
		s.dbTimes = append(s.dbTimes, c.DBTime)
		s.mu.Unlock()
	}
	return c, err
}

// An attempt's times are on the database clock, converted from the relay's
// clock by way of the claim: they must lie between the claim's database
// time and the database's clock after the relay has finished, however
// long the claim took to reach the database. Anchored before the claim
// was sent, they came out later than the database's clock by that delay.
func TestAttemptTimesNeverLaterThanTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner, ids := sqliteWithEvent(t, outbox.Event{AggregateType: "payment", AggregateID: "tx-1", EventType: "ApprovalRequested", Payload: []byte(`{}`)})
	s := &slowClaimStore{Store: inner, delay: 3 * time.Second}
	r, err := New(Config{Store: s, Sink: &flakySink{up: true}, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := inner.Routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dbAfter := snap.DBTime
	s.mu.Lock()
	dbTimes := s.dbTimes
	s.mu.Unlock()
	if len(dbTimes) != 1 {
		t.Fatalf("%d claims took events, want 1", len(dbTimes))
	}
	atts, err := inner.Attempts(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 1 || atts[0].Outcome != store.Delivered {
		t.Fatalf("attempts %+v, want one DELIVERED", atts)
	}
	a := atts[0]
	const rounding = time.Millisecond // SQLite keeps milliseconds
	if a.StartedAt.Before(dbTimes[0].Add(-rounding)) || a.FinishedAt.After(dbAfter.Add(rounding)) || a.FinishedAt.Before(a.StartedAt) {
		t.Errorf("the attempt ran from %v to %v on the database clock, want within the claim's %v and the clock after the drain, %v (the claim took %s to reach the database)",
			a.StartedAt, a.FinishedAt, dbTimes[0], dbAfter, s.delay)
	}
}
