package sqlite_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/sqlite"
)

func TestCompleteOutcomes(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	// One aggregate per outcome, each with a follower.
	kinds := []store.OutcomeKind{store.Delivered, store.Retry, store.Failed, store.Expired, store.Released, store.Released}
	var evs []outbox.Event
	for i := range kinds {
		evs = append(evs, ev(fmt.Sprintf("k%d", i), 1))
	}
	for i := range kinds {
		evs = append(evs, ev(fmt.Sprintf("k%d", i), 2))
	}
	ids := e.enqueue(t, evs...)
	heads, followers := ids[:len(kinds)], ids[len(kinds):]
	c := e.claim(t, len(kinds), time.Minute, true)
	if !sameIDs(eventIDs(c), heads) {
		t.Fatalf("claim = %v, want the heads", eventIDs(c))
	}
	outs := outcomes(c, store.Delivered)
	for i, k := range kinds {
		outs[i].Kind = k
		if k != store.Delivered {
			outs[i].Error = "error for " + string(k)
		}
	}
	outs[1].RetryIn = 30 * time.Second
	outs[2].Error = strings.Repeat("é", 2500) // stored cut to 2000 characters (textlimit.ErrorText)
	outs[4].RetryIn = 10 * time.Second
	outs[4].Attempted = false
	outs[5].Block = true
	res := e.complete(t, c, true, outs)
	if len(res.Applied) != len(kinds) || len(res.Fenced) != 0 {
		t.Fatalf("complete = %+v", res)
	}
	now := e.dbNow(t)

	delivered := e.get(t, heads[0])
	if delivered.Status != outbox.StatusProcessed || delivered.ProcessedAt.IsZero() || delivered.RetryCount != 0 ||
		delivered.LockToken != "" || !delivered.LockedUntil.IsZero() || delivered.LastError != "" {
		t.Errorf("delivered = %+v", delivered)
	}
	retried := e.get(t, heads[1])
	if retried.Status != outbox.StatusPending || retried.RetryCount != 1 || retried.LastError != "error for RETRY" ||
		!retried.ProcessedAt.IsZero() || retried.LockToken != "" {
		t.Errorf("retried = %+v", retried)
	}
	if d := retried.AvailableAt.Sub(c.DBTime); d < 30*time.Second || d > 40*time.Second {
		t.Errorf("retried available_at is %s after the claim, want about 30s", d)
	}
	if f := e.get(t, followers[1]); !f.AvailableAt.Equal(retried.AvailableAt) || f.Status != outbox.StatusPending {
		t.Errorf("retried follower: %s available %v, want PENDING at %v", f.Status, f.AvailableAt, retried.AvailableAt)
	}
	failed := e.get(t, heads[2])
	if failed.Status != outbox.StatusFailed || failed.RetryCount != 1 || failed.ProcessedAt.IsZero() ||
		len([]rune(failed.LastError)) != 2000 {
		t.Errorf("failed: %s retries %d, last_error %d characters", failed.Status, failed.RetryCount, len([]rune(failed.LastError)))
	}
	if f := e.get(t, followers[2]); f.Status != outbox.StatusBlocked {
		t.Errorf("follower of the FAILED event is %s, want BLOCKED", f.Status)
	}
	dls, err := e.store.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters = %v, %v", dls, err)
	}
	if dl := dls[0]; dl.EventID != heads[2] || dl.OutboxID != failed.ID || dl.RetryCount != 1 || dl.Reason != textlimit.ErrorText(outs[2].Error) ||
		dl.AggregateID != "k2" || dl.EventType != "ApprovalRequested" || dl.FailedAt.IsZero() || !dl.RequeuedAt.IsZero() {
		t.Errorf("dead letter = %+v", dl)
	}
	expired := e.get(t, heads[3])
	if expired.Status != outbox.StatusExpired || expired.RetryCount != 0 || expired.ProcessedAt.IsZero() || expired.LastError != "error for EXPIRED" {
		t.Errorf("expired = %+v", expired)
	}
	released := e.get(t, heads[4])
	if released.Status != outbox.StatusPending || released.RetryCount != 0 || released.LastError != "" {
		t.Errorf("released = %+v", released)
	}
	if d := released.AvailableAt.Sub(now); d < 5*time.Second || d > 10*time.Second {
		t.Errorf("released available_at is %s from now, want about 10s", d)
	}
	if b := e.get(t, heads[5]); b.Status != outbox.StatusBlocked || b.RetryCount != 0 {
		t.Errorf("released with Block = %+v", b)
	}

	// Attempt rows: one per attempted outcome, none for the unattempted release.
	for i, id := range heads {
		atts := e.attempts(t, id)
		if !outs[i].Attempted {
			if len(atts) != 0 {
				t.Errorf("%s: %d attempt rows for an event not attempted", kinds[i], len(atts))
			}
			continue
		}
		if len(atts) != 1 {
			t.Fatalf("%s: %d attempt rows, want 1", kinds[i], len(atts))
		}
		a := atts[0]
		if a.Outcome != kinds[i] || a.ClaimToken != c.Token || a.RelayID != "test-relay" || a.Attempt != 1 ||
			!a.StartedAt.Equal(c.DBTime) || !a.FinishedAt.Equal(c.DBTime.Add(time.Millisecond)) {
			t.Errorf("%s: attempt = %+v", kinds[i], a)
		}
		want := textlimit.ErrorText(outs[i].Error) // 1,999 characters and "…" for the long one
		if a.Error != want {
			t.Errorf("%s: attempt error %d characters, want %d", kinds[i], len(a.Error), len(want))
		}
	}

	// Replay: nothing changes, no second attempt row, everything fenced.
	res = e.complete(t, c, true, outs)
	if len(res.Applied) != 0 || len(res.Fenced) != len(kinds) {
		t.Fatalf("replay = %+v, want all fenced", res)
	}
	for i, id := range heads {
		if n := len(e.attempts(t, id)); outs[i].Attempted && n != 1 {
			t.Errorf("%s: %d attempt rows after a replay, want 1", kinds[i], n)
		}
	}
	if dls, _ := e.store.DeadLetters(ctx, 10); len(dls) != 1 {
		t.Errorf("%d dead letters after a replay, want 1", len(dls))
	}
	if r := e.get(t, heads[1]); r.RetryCount != 1 {
		t.Errorf("retry_count after a replay = %d, want 1", r.RetryCount)
	}
}

func TestCompleteFencedByOtherToken(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ids := e.enqueue(t, ev("f", 1), ev("g", 1))
	c := e.claim(t, 10, time.Minute, true)
	forged := &store.Claim{Token: "00000000-0000-7000-8000-000000000000", DBTime: c.DBTime, Events: c.Events}
	outs := outcomes(forged, store.Delivered)
	outs[1].Kind, outs[1].Error = store.Failed, "boom"
	res := e.complete(t, forged, true, outs)
	if len(res.Applied) != 0 || len(res.Fenced) != 2 {
		t.Fatalf("complete under a foreign token = %+v, want both fenced", res)
	}
	for _, id := range ids {
		if r := e.get(t, id); r.Status != outbox.StatusProcessing || r.LockToken != c.Token {
			t.Errorf("row changed by a fenced completion: %+v", r)
		}
	}
	atts := e.attempts(t, ids[1])
	if len(atts) != 1 || atts[0].Error != "boom; lease lost before the mark: the row was not changed" {
		t.Errorf("fenced attempt = %+v", atts)
	}
	if atts := e.attempts(t, ids[0]); len(atts) != 1 || atts[0].Error != "lease lost before the mark: the row was not changed" {
		t.Errorf("fenced attempt without error = %+v", atts)
	}
	if dls, _ := e.store.DeadLetters(context.Background(), 10); len(dls) != 0 {
		t.Errorf("fenced FAILED wrote a dead letter")
	}
	// The real owner still completes.
	if res := e.complete(t, c, true, outcomes(c, store.Delivered)); len(res.Applied) != 2 {
		t.Fatalf("owner's complete = %+v", res)
	}
	if res, err := e.store.Complete(context.Background(), store.CompleteRequest{Token: c.Token}); err != nil || len(res.Applied)+len(res.Fenced) != 0 {
		t.Errorf("empty complete = %+v, %v", res, err)
	}
}

// TestReaperAfterShortLease: a claim whose lanes' lease ended (the relay
// stopped renewing it) is reaped: its events are audited LEASE_EXPIRED
// under its token and are PENDING for the next claim; the old claim's
// completion is fenced.
func TestReaperAfterShortLease(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	ids := e.enqueue(t, ev("r", 1), ev("r", 2))
	// The reap waits for the lease to end. A claim commits only with half
	// its lease left on its lanes: at 1 s, a balance, read and commit that
	// a busy machine slows past 500 ms would come back empty.
	c := e.claim(t, 10, 3*time.Second, true)
	if len(c.Events) != 2 {
		t.Fatalf("claim = %v", eventIDs(c))
	}
	for _, id := range ids {
		if r := e.get(t, id); r.Status != outbox.StatusProcessing || r.LockToken != c.Token {
			t.Fatalf("claimed row = %+v, want PROCESSING under the claim's token", r)
		}
	}
	var reaped int64
	wait.For(t, time.Minute, "the reaper to return the events", func() bool {
		res, err := e.store.Sweep(ctx, store.SweepRequest{RelayID: "sweeper-1", FailedBlocks: true, Limit: 1})
		if err != nil {
			t.Fatalf("sweep: %v", err)
		}
		reaped += res.Reaped
		return reaped == 2
	})
	for _, id := range ids {
		r := e.get(t, id)
		if r.Status != outbox.StatusPending || r.RetryCount != 0 || r.LockToken != "" || !r.LockedUntil.IsZero() {
			t.Errorf("reaped row = %+v", r)
		}
		atts := e.attempts(t, id)
		if len(atts) != 1 || atts[0].Outcome != store.LeaseExpired || atts[0].ClaimToken != c.Token ||
			atts[0].RelayID != "sweeper-1" || atts[0].Attempt != 1 ||
			!strings.HasPrefix(atts[0].Error, "the lease of its lane ended") {
			t.Errorf("reap audit = %+v", atts)
		}
	}
	// The old owner is fenced; a new claim takes the events again.
	res := e.complete(t, c, true, outcomes(c, store.Delivered))
	if len(res.Fenced) != 2 {
		t.Fatalf("old owner's complete = %+v, want fenced", res)
	}
	c2 := e.claim(t, 10, time.Minute, true)
	if !sameIDs(eventIDs(c2), ids) || c2.Events[0].Attempt != 1 {
		t.Fatalf("claim after reap = %v", eventIDs(c2))
	}
	if res := e.complete(t, c2, true, outcomes(c2, store.Delivered)); len(res.Applied) != 2 {
		t.Fatalf("new owner's complete = %+v", res)
	}
}

func TestExpiry(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	past := ev("x", 1)
	past.ExpiresAt = time.Now().Add(-time.Minute)
	short := ev("y", 1)
	short.TTL = 30 * time.Millisecond
	blockedLater := ev("z", 2)
	blockedLater.TTL = 30 * time.Millisecond
	long := ev("w", 1)
	long.TTL = time.Hour
	ids := e.enqueue(t, past, ev("z", 1), short, blockedLater, long)

	// A claim hands out an event already past its deadline marked Expired.
	c := e.claim(t, 1, time.Minute, true)
	if len(c.Events) != 1 || c.Events[0].EventID != ids[0] || !c.Events[0].Expired {
		t.Fatalf("claim = %+v, want the past-deadline event marked Expired", c.Events)
	}
	e.complete(t, c, true, outcomes(c, store.Expired))
	// z1 fails so that z2 is BLOCKED: the sweeper expires BLOCKED events too.
	c = e.claim(t, 1, time.Minute, true)
	if len(c.Events) != 1 || c.Events[0].EventID != ids[1] {
		t.Fatalf("claim = %v, want z1", eventIDs(c))
	}
	e.complete(t, c, true, outcomes(c, store.Failed))
	if r := e.get(t, ids[3]); r.Status != outbox.StatusBlocked {
		t.Fatalf("z2 = %s, want BLOCKED", r.Status)
	}

	var expired int64
	wait.For(t, 10*time.Second, "the sweeper to expire the short-TTL events", func() bool {
		res, err := e.store.Sweep(ctx, store.SweepRequest{RelayID: "sw", FailedBlocks: true})
		if err != nil {
			t.Fatalf("sweep: %v", err)
		}
		expired += res.Expired
		return expired >= 2
	})
	if expired != 2 {
		t.Fatalf("expired %d, want 2", expired)
	}
	for _, id := range []outbox.EventID{ids[2], ids[3]} {
		r := e.get(t, id)
		if r.Status != outbox.StatusExpired || r.ProcessedAt.IsZero() ||
			r.LastError != "expired before delivery: deadline was "+r.ExpiresAt.Format("2006-01-02T15:04:05.000Z") {
			t.Errorf("expired row = %+v", r)
		}
		atts := e.attempts(t, id)
		if len(atts) != 1 || atts[0].Outcome != store.Expired || atts[0].RelayID != "sw" || atts[0].Error != r.LastError {
			t.Errorf("expiry audit = %+v", atts)
		}
	}
	if r := e.get(t, ids[4]); r.Status != outbox.StatusPending {
		t.Errorf("long-TTL event = %s, want PENDING", r.Status)
	}
}

// Several stores (as several relays would) claim and complete concurrently
// on one file while a producer keeps enqueueing: every event is delivered
// exactly once, and each aggregate in id order.
func TestConcurrentRelays(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	const relays, aggregates, perAggregate = 3, 8, 12
	total := aggregates * perAggregate

	var stores []*sqlite.Store
	for i := 0; i < relays; i++ {
		s, err := sqlite.Open(ctx, e.path, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}

	var mu sync.Mutex
	delivered := map[string][]int64{}
	seen := map[int64]int{}
	count := 0
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, relays+1)

	wg.Add(1)
	go func() { // the producer
		defer wg.Done()
		for n := 0; n < perAggregate; n++ {
			var batch []outbox.Event
			for a := 0; a < aggregates; a++ {
				batch = append(batch, ev(fmt.Sprintf("agg-%d", a), n))
			}
			tx, err := e.app.BeginTx(ctx, nil)
			if err != nil {
				errs <- err
				return
			}
			if _, err := e.store.Enqueue(ctx, tx, batch...); err != nil {
				tx.Rollback()
				errs <- err
				return
			}
			if err := tx.Commit(); err != nil {
				errs <- err
				return
			}
		}
	}()
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			relayID := fmt.Sprintf("relay-%d", i)
			for {
				select {
				case <-done:
					return
				default:
				}
				c, err := s.Claim(ctx, store.ClaimRequest{RelayID: relayID, Limit: 5, Lease: time.Minute, FailedBlocks: true})
				if err != nil {
					errs <- err
					return
				}
				if len(c.Events) == 0 {
					select { // the poll interval
					case <-done:
						return
					case <-time.After(time.Millisecond):
					}
					continue
				}
				mu.Lock()
				for _, ev := range c.Events {
					delivered[ev.AggregateID] = append(delivered[ev.AggregateID], ev.ID)
					seen[ev.ID]++
					count++
				}
				mu.Unlock()
				res, err := s.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: relayID, FailedBlocks: true,
					Outcomes: outcomes(c, store.Delivered)})
				if err != nil {
					errs <- err
					return
				}
				if len(res.Fenced) != 0 {
					errs <- fmt.Errorf("fenced with a one-minute lease: %v", res.Fenced)
					return
				}
			}
		}()
	}
	wait.For(t, 60*time.Second, "every event to be delivered", func() bool {
		select {
		case err := <-errs:
			close(done)
			t.Fatalf("worker: %v", err)
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		return count >= total
	})
	close(done)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("worker: %v", err)
	default:
	}
	if count != total || len(seen) != total {
		t.Fatalf("delivered %d (%d distinct), want %d exactly once", count, len(seen), total)
	}
	for agg, got := range delivered {
		if !sort.SliceIsSorted(got, func(i, j int) bool { return got[i] < got[j] }) {
			t.Errorf("aggregate %s delivered out of order: %v", agg, got)
		}
	}
	if st := e.stats(t, true); st.Counts[outbox.StatusProcessed] != int64(total) {
		t.Errorf("processed = %d, want %d", st.Counts[outbox.StatusProcessed], total)
	}
}
