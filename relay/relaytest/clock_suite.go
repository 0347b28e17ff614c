package relaytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/storetest"
)

// clockSkew is how far the relay's clock is off from the database's in
// the skewed-clock tests: far more than any claim takes, so that a time
// taken on the wrong clock is told apart from the delays of a loaded
// machine.
const clockSkew = 10 * time.Minute

// Times of testRelayClockSkew.
const (
	skewLiveTTL    = time.Minute      // deadline of the event to deliver
	skewLapsingTTL = 20 * time.Second // deadline of the event that lapses at the sink
	skewRetryAfter = time.Minute      // the retried event's backoff
	skewLease      = 2 * time.Minute
	// skewSlack absorbs the stores' rounding of times (SQLite keeps
	// milliseconds) and the reads of the database clock around them.
	skewSlack = time.Second
)

// skewText says how the relay's clock stands to the database's.
func skewText(skew time.Duration) string {
	if skew < 0 {
		return fmt.Sprintf("%s behind the database's", -skew)
	}
	return fmt.Sprintf("%s ahead of the database's", skew)
}

// dbClock reads the database's clock (the clock of Routes, the same
// reading every claim, lease and deadline is taken on).
func dbClock(ctx context.Context, h *storetest.Harness) (time.Time, error) {
	snap, err := h.Store.Routes(ctx)
	return snap.DBTime, err
}

// skewSink is what the sink of testRelayClockSkew saw, for the test to
// check once the relay has stopped (the sink runs on the relay's
// goroutines).
type skewSink struct {
	mu sync.Mutex
	// lapsingSeen: the event meant to lapse at the sink reached it.
	lapsingSeen bool
	// leaseOK and leaseText: the live event's locked_until, read while the
	// sink held it, was the database clock at the claim plus the lease.
	leaseChecked, leaseOK bool
	leaseText             string
	errs                  []string // what went wrong inside the sink
}

func (s *skewSink) errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	s.mu.Lock()
	s.errs = append(s.errs, err.Error())
	s.mu.Unlock()
	return err
}

// skewedDB is the harness's store as a relay sees it when the database's
// clock is off from the relay's: every time the relay reads from the
// store is shifted by off (the database's clock minus the relay's), and
// every time it writes is shifted back. The store decides on its own
// clock as ever; the relay keeps its own, time.Now, which the context
// package and every sink read too.
type skewedDB struct {
	store.Store
	off time.Duration
}

func shiftTime(t time.Time, d time.Duration) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(d)
}

// Claim implements relay.Store.
func (s skewedDB) Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error) {
	c, err := s.Store.Claim(ctx, req)
	if c == nil {
		return c, err
	}
	out := *c
	out.DBTime, out.LockedUntil = shiftTime(c.DBTime, s.off), shiftTime(c.LockedUntil, s.off)
	out.Events = make([]store.Claimed, len(c.Events))
	for i, ev := range c.Events {
		ev.CreatedAt, ev.ExpiresAt, ev.Deadline = shiftTime(ev.CreatedAt, s.off), shiftTime(ev.ExpiresAt, s.off), shiftTime(ev.Deadline, s.off)
		out.Events[i] = ev
	}
	return &out, err
}

// Complete implements relay.Store.
func (s skewedDB) Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	outs := make([]store.Outcome, len(req.Outcomes))
	for i, o := range req.Outcomes {
		o.StartedAt, o.FinishedAt = shiftTime(o.StartedAt, -s.off), shiftTime(o.FinishedAt, -s.off)
		outs[i] = o
	}
	req.Outcomes = outs
	return s.Store.Complete(ctx, req)
}

// Routes implements relay.Store: the breaker reads the database clock
// and its routes' times through it.
func (s skewedDB) Routes(ctx context.Context) (store.RouteSnapshot, error) {
	snap, err := s.Store.Routes(ctx)
	snap.DBTime = shiftTime(snap.DBTime, s.off)
	routes := make([]store.Route, len(snap.Routes))
	for i, rt := range snap.Routes {
		rt.OpenedAt, rt.ProbeAt, rt.UpdatedAt = shiftTime(rt.OpenedAt, s.off), shiftTime(rt.ProbeAt, s.off), shiftTime(rt.UpdatedAt, s.off)
		routes[i] = rt
	}
	snap.Routes = routes
	return snap, err
}

// GetEvent implements relay.Store.
func (s skewedDB) GetEvent(ctx context.Context, id outbox.EventID) (store.Record, error) {
	r, err := s.Store.GetEvent(ctx, id)
	r.CreatedAt, r.ProcessedAt, r.AvailableAt = shiftTime(r.CreatedAt, s.off), shiftTime(r.ProcessedAt, s.off), shiftTime(r.AvailableAt, s.off)
	r.ExpiresAt, r.LockedUntil = shiftTime(r.ExpiresAt, s.off), shiftTime(r.LockedUntil, s.off)
	return r, err
}

// testRelayClockSkew runs a relay whose clock is skew off the database's
// (ahead when positive; skewedDB) and checks that deadlines, leases and
// backoff are kept on the database's clock:
//   - an event whose deadline is a minute away on the database's clock is
//     delivered, with the deadline converted to the relay's clock,
//     however far ahead the relay's clock is;
//   - an event whose deadline passes on the database's clock while the
//     sink holds it is refused by the sink (which compares its Deadline
//     with its clock, the relay's, as every sink does) and ends EXPIRED,
//     however far behind the relay's clock is; so does an event already
//     past its deadline;
//   - the live event's locked_until is the database clock plus the lease,
//     and a retried event's available_at the database clock plus its
//     backoff;
//   - the audit trail's start and finish times are on the database's clock.
//
// The test reads the database's clock and the stored times through the
// harness's store, unshifted.
func testRelayClockSkew(t *testing.T, h *storetest.Harness, skew time.Duration) {
	ctx := context.Background()
	dbBefore, err := dbClock(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	live := storetest.PaymentEvent("skew-live", 1)
	live.TTL = skewLiveTTL
	lapsing := storetest.PaymentEvent("skew-lapsing", 1)
	lapsing.TTL = skewLapsingTTL
	past := storetest.PaymentEvent("skew-past", 1)
	past.ExpiresAt = dbBefore.Add(-time.Minute)
	retried := storetest.PaymentEvent("skew-retried", 1)
	ids := storetest.Enqueue(t, h, live, lapsing, past, retried)
	liveID, lapsingID, pastID, retriedID := ids[0], ids[1], ids[2], ids[3]
	expiresAt := map[outbox.EventID]time.Time{}
	for _, id := range []outbox.EventID{liveID, lapsingID} {
		rec, err := h.Store.GetEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		expiresAt[id] = rec.ExpiresAt
	}

	seen := &skewSink{}
	rec := &Recorder{Name: "skewed", IgnoreDeadline: true, Fail: func(m outbox.Message) error {
		switch m.EventID {
		case liveID:
			seen.checkLease(h, m.EventID, dbBefore)
		case lapsingID:
			seen.mu.Lock()
			seen.lapsingSeen = true
			seen.mu.Unlock()
			// Hold the event until its deadline has passed on the
			// database's clock.
			if err := seen.waitDBPast(h, expiresAt[lapsingID]); err != nil {
				return err
			}
		case retriedID:
			if m.Attempt == 1 {
				return outbox.Retryable(errors.New("gateway busy"), skewRetryAfter)
			}
		}
		// The sink honours the deadline on its clock, the relay's.
		if !m.Deadline.IsZero() && !time.Now().Before(m.Deadline) {
			return fmt.Errorf("deadline %v passed: %w", m.Deadline, context.DeadlineExceeded)
		}
		return nil
	}}
	cfg := testConfig(h, rec, "skewed")
	cfg.Store = skewedDB{Store: h.Store, off: -skew}
	cfg.Lease = skewLease
	stop := runRelays(t, newRelay(t, cfg))
	wait.Until(t, 2*time.Minute, "the events to be final and the retried one to wait for its retry", func() (bool, error) {
		for _, id := range []outbox.EventID{liveID, lapsingID, pastID} {
			r, err := h.Store.GetEvent(ctx, id)
			if err != nil || !r.Status.Final() {
				return false, err
			}
		}
		r, err := h.Store.GetEvent(ctx, retriedID)
		return r.Status == outbox.StatusPending && r.RetryCount == 1, err
	})
	stop()
	dbAfter, err := dbClock(ctx, h)
	if err != nil {
		t.Fatal(err)
	}

	seen.mu.Lock()
	defer seen.mu.Unlock()
	for _, e := range seen.errs {
		t.Errorf("sink: %s", e)
	}
	want := map[outbox.EventID]outbox.Status{liveID: outbox.StatusProcessed, lapsingID: outbox.StatusExpired, pastID: outbox.StatusExpired}
	for id, st := range want {
		r, err := h.Store.GetEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != st {
			t.Errorf("%s (deadline %v on the database clock, the relay's clock %s): %s %q, want %s",
				r.AggregateID, r.ExpiresAt, skewText(skew), r.Status, r.LastError, st)
		}
	}
	delivered := map[outbox.EventID]Delivery{}
	for _, d := range rec.Deliveries() {
		delivered[d.EventID] = d
	}
	if _, ok := delivered[lapsingID]; ok {
		t.Errorf("the event whose deadline passed on the database clock was delivered (the relay's clock %s)", skewText(skew))
	}
	if _, ok := delivered[pastID]; ok {
		t.Errorf("the event already past its deadline was delivered (the relay's clock %s)", skewText(skew))
	}
	if !seen.lapsingSeen {
		t.Logf("the event with a %s deadline never reached the sink: it expired before it was sent", skewLapsingTTL)
	}
	// The deadline the sink got is expires_at on the relay's clock. The
	// relay read expires_at as expiresAt-skew (skewedDB); on its own
	// clock, the real one, that deadline is expiresAt. The conversion errs
	// on the early side by as long as the claim took (up to seconds on a
	// loaded database); later it may never be.
	if d, ok := delivered[liveID]; ok {
		want := expiresAt[liveID]
		if d.Deadline.Before(want.Add(-time.Minute)) || d.Deadline.After(want.Add(skewSlack)) {
			t.Errorf("the live event reached the sink with deadline %v, want about %v: its expires_at converted to the relay's clock (%s)",
				d.Deadline, want, skewText(skew))
		}
	}
	if seen.leaseChecked && !seen.leaseOK {
		t.Errorf("while delivered, the live event %s", seen.leaseText)
	}
	// The retry is due a backoff after the outcome was recorded, on the
	// database's clock.
	r, err := h.Store.GetEvent(ctx, retriedID)
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi := dbBefore.Add(skewRetryAfter-skewSlack), dbAfter.Add(skewRetryAfter+skewSlack); r.AvailableAt.Before(lo) || r.AvailableAt.After(hi) {
		t.Errorf("the retried event is due at %v, want between %v and %v: the database clock plus its backoff of %s (the relay's clock %s)",
			r.AvailableAt, lo, hi, skewRetryAfter, skewText(skew))
	}
	// The attempts' times are on the database's clock.
	for _, id := range []outbox.EventID{liveID, lapsingID, retriedID} {
		atts, err := h.Store.Attempts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range atts {
			if a.StartedAt.Before(dbBefore.Add(-skewSlack)) || a.FinishedAt.After(dbAfter.Add(skewSlack)) || a.FinishedAt.Before(a.StartedAt) {
				t.Errorf("attempt %d (%s) of %s ran from %v to %v, want within %v to %v on the database clock (the relay's clock %s)",
					a.Attempt, a.Outcome, id, a.StartedAt, a.FinishedAt, dbBefore, dbAfter, skewText(skew))
			}
		}
	}
}

// checkLease reads the event's lease while the sink holds it: locked_until
// must be the database clock at the claim (after dbBefore, before now)
// plus the lease.
func (s *skewSink) checkLease(h *storetest.Harness, id outbox.EventID, dbBefore time.Time) {
	ctx := context.Background()
	r, err := h.Store.GetEvent(ctx, id)
	if err != nil {
		_ = s.errorf("reading the live event while delivered: %v", err)
		return
	}
	now, err := dbClock(ctx, h)
	if err != nil {
		_ = s.errorf("reading the database clock: %v", err)
		return
	}
	lo, hi := dbBefore.Add(skewLease-skewSlack), now.Add(skewLease+skewSlack)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaseChecked = true
	s.leaseOK = r.Status == outbox.StatusProcessing && !r.LockedUntil.Before(lo) && !r.LockedUntil.After(hi)
	s.leaseText = fmt.Sprintf("is %s locked until %v, want PROCESSING locked until between %v and %v: the database clock plus the lease of %s",
		r.Status, r.LockedUntil, lo, hi, skewLease)
}

// waitDBPast waits until the database's clock is past at (bounded: a
// minute past it by the local clock, which the database shares here).
func (s *skewSink) waitDBPast(h *storetest.Harness, at time.Time) error {
	ctx := context.Background()
	limit := time.Now().Add(time.Until(at) + time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		now, err := dbClock(ctx, h)
		if err != nil {
			return s.errorf("reading the database clock: %v", err)
		}
		if now.After(at) {
			return nil
		}
		if time.Now().After(limit) {
			return s.errorf("the database clock stayed at %v, before %v", now, at)
		}
		<-tick.C
	}
}
