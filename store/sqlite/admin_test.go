package sqlite_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/sqlite"
)

// failHead claims the due events, fails the first (want) and releases the
// rest of its aggregate as BLOCKED, as the relay does.
func (e *env) failHead(t *testing.T, want outbox.EventID) {
	t.Helper()
	c := e.claim(t, 10, time.Minute, true)
	if len(c.Events) == 0 || c.Events[0].EventID != want {
		t.Fatalf("claim = %v, want %s first", eventIDs(c), want)
	}
	outs := outcomes(c, store.Released)
	outs[0].Kind, outs[0].Error = store.Failed, "permanent error: HTTP 400"
	for i := 1; i < len(outs); i++ {
		if c.Events[i].AggregateID != c.Events[0].AggregateID {
			t.Fatalf("claim = %v: another aggregate", eventIDs(c))
		}
		outs[i].Block, outs[i].Attempted, outs[i].Error = true, false, ""
	}
	if res := e.complete(t, c, true, outs); len(res.Applied) != len(outs) {
		t.Fatalf("complete = %+v", res)
	}
}

// findAttempt returns the one audit row with the outcome.
func findAttempt(t *testing.T, atts []store.Attempt, kind store.OutcomeKind) store.Attempt {
	t.Helper()
	var found []store.Attempt
	for _, a := range atts {
		if a.Outcome == kind {
			found = append(found, a)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s audit rows in %+v, want 1", len(found), kind, atts)
	}
	return found[0]
}

func TestBlockingRequeueAndSkip(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	ids := e.enqueue(t, ev("A", 1), ev("A", 2), ev("A", 3), ev("B", 1))
	a1, a2, a3, b1 := ids[0], ids[1], ids[2], ids[3]

	// A1 fails alone: its followers are BLOCKED by the completion.
	c := e.claim(t, 1, time.Minute, true)
	if !sameIDs(eventIDs(c), []outbox.EventID{a1}) {
		t.Fatalf("claim = %v, want A1", eventIDs(c))
	}
	e.complete(t, c, true, outcomes(c, store.Failed))
	for _, id := range []outbox.EventID{a2, a3} {
		if r := e.get(t, id); r.Status != outbox.StatusBlocked {
			t.Fatalf("follower = %s, want BLOCKED", r.Status)
		}
	}
	// One aggregate's failure does not hold up another.
	if c := e.claim(t, 10, time.Minute, true); !sameIDs(eventIDs(c), []outbox.EventID{b1}) {
		t.Fatalf("claim = %v, want B1", eventIDs(c))
	} else {
		e.complete(t, c, true, outcomes(c, store.Delivered))
	}
	// A late event of the blocked aggregate waits too: PENDING, but behind
	// a FAILED event. The sweeper marks it BLOCKED.
	late := e.enqueue(t, ev("A", 4))[0]
	if n, err := e.store.CountMovable(ctx, true); err != nil || n != 0 {
		t.Errorf("movable = %d, %v; want 0 (A4 waits behind a FAILED event)", n, err)
	}
	if n, err := e.store.CountMovable(ctx, false); err != nil || n != 1 {
		t.Errorf("movable without blocking = %d, %v; want 1", n, err)
	}
	res, err := e.store.Sweep(ctx, store.SweepRequest{FailedBlocks: true})
	if err != nil || res.Blocked != 1 || res.Unblocked != 0 {
		t.Fatalf("sweep = %+v, %v; want one blocked", res, err)
	}
	if r := e.get(t, late); r.Status != outbox.StatusBlocked {
		t.Fatalf("late event = %s", r.Status)
	}
	// So does the claim, without waiting for a sweep: it sees the FAILED
	// head and marks the rows behind it BLOCKED.
	later := e.enqueue(t, ev("A", 5))[0]
	if c := e.claim(t, 10, time.Minute, true); len(c.Events) != 0 {
		t.Fatalf("claim = %v, want nothing past the FAILED head", eventIDs(c))
	}
	if r := e.get(t, later); r.Status != outbox.StatusBlocked {
		t.Fatalf("event behind a FAILED head after a claim = %s, want BLOCKED", r.Status)
	}

	st := e.stats(t, true)
	if st.BlockedAggregateCount != 1 || len(st.BlockedAggregates) != 1 {
		t.Fatalf("blocked aggregates = %+v", st)
	}
	if b := st.BlockedAggregates[0]; b.AggregateType != "payment" || b.AggregateID != "A" || b.FailedEventID != a1 || b.Waiting != 4 {
		t.Errorf("blocked aggregate = %+v", b)
	}
	if st.DeadLetters != 1 || st.Counts[outbox.StatusBlocked] != 4 || st.Counts[outbox.StatusFailed] != 1 {
		t.Errorf("stats = %+v", st)
	}

	// Operator errors.
	if err := e.store.Requeue(ctx, store.OperatorAction{EventID: outbox.NewEventID()}); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("requeue unknown = %v, want ErrNotFound", err)
	}
	if err := e.store.Requeue(ctx, store.OperatorAction{EventID: b1}); !errors.Is(err, outbox.ErrConflict) ||
		!strings.Contains(err.Error(), "is PROCESSED; requeued applies to FAILED or EXPIRED events") {
		t.Errorf("requeue PROCESSED = %v, want ErrConflict", err)
	}
	if err := e.store.Skip(ctx, store.OperatorAction{EventID: a2}); !errors.Is(err, outbox.ErrConflict) {
		t.Errorf("skip BLOCKED = %v, want ErrConflict", err)
	}

	// Requeue: A1 is due now, its followers are released, the dead letter
	// is marked, and the action is audited.
	if err := e.store.Requeue(ctx, store.OperatorAction{EventID: a1, Actor: "alice", Reason: "gateway fixed"}); err != nil {
		t.Fatal(err)
	}
	r := e.get(t, a1)
	if r.Status != outbox.StatusPending || r.RetryCount != 1 || !r.ProcessedAt.IsZero() || r.AvailableAt.After(e.dbNow(t)) {
		t.Errorf("requeued = %+v", r)
	}
	for _, id := range []outbox.EventID{a2, a3, late, later} {
		if r := e.get(t, id); r.Status != outbox.StatusPending {
			t.Errorf("follower after requeue = %s, want PENDING", r.Status)
		}
	}
	dls, err := e.store.DeadLetters(ctx, 0)
	if err != nil || len(dls) != 1 || dls[0].RequeuedAt.IsZero() {
		t.Fatalf("dead letters after requeue = %+v, %v", dls, err)
	}
	if st := e.stats(t, true); st.DeadLetters != 0 || st.BlockedAggregateCount != 0 {
		t.Errorf("stats after requeue = %+v", st)
	}
	last := findAttempt(t, e.attempts(t, a1), store.Requeued)
	if last.Outcome != store.Requeued || last.RelayID != "operator:alice" || last.Attempt != 1 ||
		last.Error != "requeued by alice (was FAILED): gateway fixed" || last.ClaimToken == "" {
		t.Errorf("requeue audit = %+v", last)
	}

	// Fail it again, then skip it: the aggregate moves on.
	e.failHead(t, a1)
	if r := e.get(t, a2); r.Status != outbox.StatusBlocked {
		t.Fatalf("a2 = %s", r.Status)
	}
	if err := e.store.Skip(ctx, store.OperatorAction{EventID: a1}); err != nil {
		t.Fatal(err)
	}
	if r := e.get(t, a1); r.Status != outbox.StatusSkipped || r.RetryCount != 2 {
		t.Errorf("skipped = %+v", r)
	}
	if last := findAttempt(t, e.attempts(t, a1), store.Skipped); last.Outcome != store.Skipped || last.RelayID != "operator:operator" || last.Error != "skipped by operator (was FAILED)" {
		t.Errorf("skip audit = %+v", last)
	}
	c = e.claim(t, 10, time.Minute, true)
	if !sameIDs(eventIDs(c), []outbox.EventID{a2, a3, late, later}) {
		t.Fatalf("claim after skip = %v, want A2 A3 A4 A5", eventIDs(c))
	}
	if dls, _ := e.store.DeadLetters(ctx, 10); len(dls) != 2 {
		t.Errorf("dead letters = %d, want 2 (the skipped event stays)", len(dls))
	}
}

func TestSweepUnblocksWhenFailedDoesNotBlock(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	ids := e.enqueue(t, ev("A", 1), ev("A", 2))
	e.failHead(t, ids[0])
	if r := e.get(t, ids[1]); r.Status != outbox.StatusBlocked {
		t.Fatalf("a2 = %s", r.Status)
	}
	// Under the continue policy, nothing stays BLOCKED and FAILED heads are
	// not heads.
	res, err := e.store.Sweep(ctx, store.SweepRequest{FailedBlocks: false, Limit: 1})
	if err != nil || res.Unblocked != 1 || res.Blocked != 0 {
		t.Fatalf("sweep = %+v, %v", res, err)
	}
	c, err := e.store.Claim(ctx, store.ClaimRequest{RelayID: "test-relay", Limit: 10, Lease: time.Minute, FailedBlocks: false})
	if err != nil || !sameIDs(eventIDs(c), ids[1:]) {
		t.Fatalf("claim = %v, %v; want A2", c, err)
	}
	// Completing a FAILED outcome without blocking leaves followers PENDING.
	e2 := newEnv(t, sqlite.Config{})
	ids2 := e2.enqueue(t, ev("A", 1), ev("A", 2))
	c2, err := e2.store.Claim(ctx, store.ClaimRequest{RelayID: "test-relay", Limit: 1, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e2.complete(t, c2, false, outcomes(c2, store.Failed))
	if r := e2.get(t, ids2[1]); r.Status != outbox.StatusPending {
		t.Errorf("follower under continue = %s, want PENDING", r.Status)
	}
}

func TestRequeueExpiredDeadline(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	a := ev("q", 1)
	a.ExpiresAt = time.Now().Add(-time.Second)
	b := ev("r", 1)
	b.ExpiresAt = time.Now().Add(-time.Second)
	ids := e.enqueue(t, a, b)
	res, err := e.store.Sweep(ctx, store.SweepRequest{})
	if err != nil || res.Expired != 2 {
		t.Fatalf("sweep = %+v, %v", res, err)
	}
	if err := e.store.Skip(ctx, store.OperatorAction{EventID: ids[0]}); !errors.Is(err, outbox.ErrConflict) {
		t.Errorf("skip EXPIRED = %v, want ErrConflict", err)
	}
	// Without a new TTL the passed deadline is removed.
	if err := e.store.Requeue(ctx, store.OperatorAction{EventID: ids[0], Actor: "bob"}); err != nil {
		t.Fatal(err)
	}
	if r := e.get(t, ids[0]); r.Status != outbox.StatusPending || !r.ExpiresAt.IsZero() {
		t.Errorf("requeued without TTL = %+v", r)
	}
	// With one, the deadline is now + TTL on the database clock.
	before := e.dbNow(t)
	if err := e.store.Requeue(ctx, store.OperatorAction{EventID: ids[1], NewTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	r := e.get(t, ids[1])
	if d := r.ExpiresAt.Sub(r.AvailableAt); r.Status != outbox.StatusPending || d != time.Minute || r.AvailableAt.Before(before) {
		t.Errorf("requeued with TTL = %+v", r)
	}
	c := e.claim(t, 10, time.Minute, true)
	if len(c.Events) != 2 || c.Events[0].Expired || c.Events[1].Expired {
		t.Errorf("claim after requeue = %+v", c.Events)
	}
}

func TestStats(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	st := e.stats(t, true)
	if len(st.Counts) != len(outbox.Statuses) {
		t.Fatalf("counts = %v, want every status", st.Counts)
	}
	for _, s := range outbox.Statuses {
		if n, ok := st.Counts[s]; !ok || n != 0 {
			t.Errorf("count %s = %d, %v", s, n, ok)
		}
	}
	if st.OldestPendingAge != 0 || st.DeadLetters != 0 || st.BlockedAggregates != nil {
		t.Errorf("empty stats = %+v", st)
	}
	ids := e.enqueue(t, ev("s", 1), ev("t", 1), ev("u", 1))
	created := e.get(t, ids[0]).CreatedAt
	e.waitDBClockPast(t, created.Add(20*time.Millisecond))
	c := e.claim(t, 1, time.Minute, true)
	e.complete(t, c, true, outcomes(c, store.Delivered))
	c = e.claim(t, 1, time.Minute, true)
	st = e.stats(t, false)
	if st.Counts[outbox.StatusPending] != 1 || st.Counts[outbox.StatusProcessing] != 1 || st.Counts[outbox.StatusProcessed] != 1 {
		t.Errorf("counts = %v", st.Counts)
	}
	if st.OldestPendingAge < 20*time.Millisecond || st.OldestPendingAge > time.Minute {
		t.Errorf("oldest pending age = %s", st.OldestPendingAge)
	}
	if st.BlockedAggregates != nil {
		t.Errorf("blocked aggregates without failedBlocks = %v", st.BlockedAggregates)
	}
	if n, err := e.store.CountMovable(context.Background(), true); err != nil || n != 2 {
		t.Errorf("movable = %d, %v; want 2", n, err)
	}
	_ = c
}

func TestListAndGet(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	if _, err := e.store.GetEvent(ctx, outbox.NewEventID()); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("get unknown = %v, want ErrNotFound", err)
	}
	ids := e.enqueue(t, ev("l", 1), ev("l", 2), ev("m", 1), ev("l", 3))
	c := e.claim(t, 1, time.Minute, true)
	e.complete(t, c, true, outcomes(c, store.Delivered))

	all, err := e.store.ListEvents(ctx, store.ListFilter{})
	if err != nil || len(all) != 4 || all[0].EventID != ids[3] || all[3].EventID != ids[0] {
		t.Fatalf("list all = %d, %v; want 4 newest first", len(all), err)
	}
	l, err := e.store.ListEvents(ctx, store.ListFilter{AggregateType: "payment", AggregateID: "l", Limit: 2})
	if err != nil || len(l) != 2 || l[0].EventID != ids[3] || l[1].EventID != ids[1] {
		t.Fatalf("list l = %v, %v", l, err)
	}
	older, err := e.store.ListEvents(ctx, store.ListFilter{AggregateID: "l", BeforeID: l[1].ID})
	if err != nil || len(older) != 1 || older[0].EventID != ids[0] {
		t.Fatalf("page before %d = %v, %v", l[1].ID, older, err)
	}
	done, err := e.store.ListEvents(ctx, store.ListFilter{Status: outbox.StatusProcessed})
	if err != nil || len(done) != 1 || done[0].EventID != ids[0] || done[0].ProcessedAt.IsZero() {
		t.Fatalf("list processed = %v, %v", done, err)
	}
	none, err := e.store.ListEvents(ctx, store.ListFilter{AggregateType: "merchant"})
	if err != nil || len(none) != 0 {
		t.Fatalf("list merchant = %v, %v", none, err)
	}
	atts, err := e.store.Attempts(ctx, outbox.NewEventID())
	if err != nil || len(atts) != 0 {
		t.Fatalf("attempts of unknown = %v, %v", atts, err)
	}
}

func TestPurge(t *testing.T) {
	e := newEnv(t, sqlite.Config{})
	ctx := context.Background()
	if _, err := e.store.Purge(ctx, store.PurgeRequest{Statuses: []outbox.Status{outbox.StatusPending}}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("purge PENDING = %v, want ErrInvalidConfig", err)
	}
	if _, err := e.store.Purge(ctx, store.PurgeRequest{OlderThan: -1}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("purge negative = %v, want ErrInvalidConfig", err)
	}
	var evs []outbox.Event
	for i := 0; i < 7; i++ {
		evs = append(evs, ev("p"+string(rune('a'+i)), 1))
	}
	ids := e.enqueue(t, evs...)
	pending := e.enqueue(t, ev("keep", 1))[0]
	c := e.claim(t, 7, time.Minute, true)
	outs := outcomes(c, store.Delivered)
	outs[5].Kind = store.Failed
	outs[6].Kind = store.Expired
	e.complete(t, c, true, outs)
	var last time.Time
	for _, id := range ids {
		if p := e.get(t, id).ProcessedAt; p.After(last) {
			last = p
		}
	}

	// Nothing is old enough for a one-hour retention.
	if n, err := e.store.Purge(ctx, store.PurgeRequest{OlderThan: time.Hour, BatchSize: 2}); err != nil || n != 0 {
		t.Fatalf("purge 1h = %d, %v", n, err)
	}
	e.waitDBClockPast(t, last)
	// Pages of 2 walk the whole table: 5 PROCESSED and 1 EXPIRED go, with
	// their attempt rows; FAILED and PENDING stay.
	n, err := e.store.Purge(ctx, store.PurgeRequest{BatchSize: 2})
	if err != nil || n != 6 {
		t.Fatalf("purge = %d, %v; want 6", n, err)
	}
	for i, id := range ids {
		_, err := e.store.GetEvent(ctx, id)
		if i == 5 {
			if err != nil {
				t.Errorf("FAILED event purged: %v", err)
			}
			continue
		}
		if !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("event %d not purged: %v", i, err)
		}
		if atts := e.attempts(t, id); len(atts) != 0 {
			t.Errorf("event %d: %d attempt rows left", i, len(atts))
		}
	}
	if _, err := e.store.GetEvent(ctx, pending); err != nil {
		t.Errorf("pending event purged: %v", err)
	}
	// FAILED rows go only when named, with their dead letters.
	n, err = e.store.Purge(ctx, store.PurgeRequest{Statuses: []outbox.Status{outbox.StatusFailed}})
	if err != nil || n != 1 {
		t.Fatalf("purge FAILED = %d, %v", n, err)
	}
	if dls, _ := e.store.DeadLetters(ctx, 10); len(dls) != 0 {
		t.Errorf("dead letters left: %v", dls)
	}
	if st := e.stats(t, true); st.Counts[outbox.StatusPending] != 1 {
		t.Errorf("counts after purge = %v", st.Counts)
	}
}
