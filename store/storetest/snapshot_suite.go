package storetest

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// RunSnapshot checks Store.Snapshot (and Features.GaugeLeaser where the
// backend declares it).
func RunSnapshot(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"KnownDataSet", testSnapshotKnownDataSet},
		{"FiguresAgreeUnderWrites", testSnapshotAgreesUnderWrites},
		{"GaugeLeaseIsExclusive", testGaugeLeaseExclusive},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			tc.fn(t, h)
		})
	}
}

func snapshot(t testing.TB, h *Harness, req store.SnapshotRequest) store.Snapshot {
	t.Helper()
	snap, err := h.Store.Snapshot(context.Background(), req)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return snap
}

// testSnapshotKnownDataSet builds one event of every kind and checks every
// figure, and that delayed and backed-off events are not "due".
func testSnapshotKnownDataSet(t *testing.T, h *Harness) {
	ctx := context.Background()
	// Three FAILED heads; two of them have a later event waiting (blocked
	// aggregates), the third has none.
	Enqueue(t, h, PaymentEvent("f1", 1), PaymentEvent("f2", 1), PaymentEvent("f3", 1))
	c := claim(t, h.Store, 10, time.Minute, true)
	complete(t, h.Store, c, true, outcomes(c, store.Failed))
	Enqueue(t, h, PaymentEvent("f1", 2), PaymentEvent("f2", 2))
	if _, err := h.Store.Sweep(ctx, store.SweepRequest{FailedBlocks: true}); err != nil {
		t.Fatal(err)
	}
	// Two PROCESSED, one EXPIRED.
	Enqueue(t, h, PaymentEvent("ok", 1), PaymentEvent("ok", 2))
	c = claim(t, h.Store, 10, time.Minute, true)
	complete(t, h.Store, c, true, outcomes(c, store.Delivered))
	Enqueue(t, h, PaymentEvent("late", 1))
	c = claim(t, h.Store, 10, time.Minute, true)
	complete(t, h.Store, c, true, outcomes(c, store.Expired))
	// One PENDING in a retry backoff of an hour, one PROCESSING.
	Enqueue(t, h, PaymentEvent("backoff", 1))
	c = claim(t, h.Store, 10, time.Minute, true)
	outs := outcomes(c, store.Retry)
	outs[0].RetryIn = time.Hour
	complete(t, h.Store, c, true, outs)
	Enqueue(t, h, PaymentEvent("inflight", 1))
	if c = claim(t, h.Store, 10, time.Minute, true); len(c.Events) != 1 {
		t.Fatalf("claim = %d events, want 1", len(c.Events))
	}
	// One PENDING delayed on purpose by an hour.
	delayed := PaymentEvent("delayed", 1)
	delayed.Delay = time.Hour
	Enqueue(t, h, delayed)

	snap := snapshot(t, h, store.SnapshotRequest{FailedBlocks: true, Full: true, BlockedLimit: 10})
	want := map[outbox.Status]int64{
		outbox.StatusPending: 2, outbox.StatusProcessing: 1, outbox.StatusBlocked: 2, outbox.StatusFailed: 3,
		outbox.StatusProcessed: 2, outbox.StatusExpired: 1, outbox.StatusSkipped: 0,
	}
	for st, n := range want {
		if got, ok := snap.Counts[st]; !ok || got != n {
			t.Errorf("count of %s = %d (present %v), want %d", st, got, ok, n)
		}
	}
	if snap.DeadLetters != 3 || snap.BlockedAggregateCount != 2 || len(snap.BlockedAggregates) != 2 {
		t.Errorf("dead letters %d, blocked aggregates %d (listed %d); want 3, 2, 2",
			snap.DeadLetters, snap.BlockedAggregateCount, len(snap.BlockedAggregates))
	}
	if snap.OldestDuePendingAge != 0 {
		t.Errorf("oldest due pending age = %s with only delayed and backed-off events pending, want 0", snap.OldestDuePendingAge)
	}
	if snap.OldestPendingAge <= 0 || snap.OldestPendingAge > time.Hour {
		t.Errorf("oldest pending age = %s, want the age of the backed-off event (positive, small)", snap.OldestPendingAge)
	}
	if d := time.Since(snap.DBTime); d < -time.Minute || d > time.Minute {
		t.Errorf("database time %s is %s away from the local clock", snap.DBTime, d)
	}
	// The same figures through Stats, which counts with other queries.
	st, err := h.Store.Stats(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	for s, n := range st.Counts {
		if snap.Counts[s] != n {
			t.Errorf("snapshot counts %d %s, Stats %d", snap.Counts[s], s, n)
		}
	}
	if st.DeadLetters != snap.DeadLetters || st.BlockedAggregateCount != snap.BlockedAggregateCount {
		t.Errorf("Stats: %d dead letters, %d blocked aggregates; snapshot %d, %d",
			st.DeadLetters, st.BlockedAggregateCount, snap.DeadLetters, snap.BlockedAggregateCount)
	}

	// A due event that became due an hour ago is an hour behind.
	due := PaymentEvent("due", 1)
	due.AvailableAt = time.Now().Add(-time.Hour)
	Enqueue(t, h, due)
	snap = snapshot(t, h, store.SnapshotRequest{BlockedLimit: 1})
	if snap.OldestDuePendingAge < 59*time.Minute || snap.OldestDuePendingAge > 2*time.Hour {
		t.Errorf("oldest due pending age = %s, want about 1h", snap.OldestDuePendingAge)
	}
	if snap.Counts[outbox.StatusPending] != 3 {
		t.Errorf("PENDING = %d, want 3", snap.Counts[outbox.StatusPending])
	}
	if snap.OldestPendingAge != 0 {
		t.Errorf("without Full the snapshot read the oldest pending age (%s)", snap.OldestPendingAge)
	}
	for _, s := range store.FinalStatuses {
		if _, ok := snap.Counts[s]; ok || snap.Full {
			t.Errorf("without Full the snapshot counted %s", s)
		}
	}
	if snap.BlockedAggregateCount != 0 || snap.DeadLetters != 3 {
		t.Errorf("without FailedBlocks: %d blocked aggregates (want 0), %d dead letters (want 3)", snap.BlockedAggregateCount, snap.DeadLetters)
	}
	snap = snapshot(t, h, store.SnapshotRequest{FailedBlocks: true, BlockedLimit: 1})
	if snap.BlockedAggregateCount != 2 || len(snap.BlockedAggregates) != 1 {
		t.Errorf("BlockedLimit 1: count %d, listed %d; want 2 and 1", snap.BlockedAggregateCount, len(snap.BlockedAggregates))
	}
}

// testSnapshotAgreesUnderWrites fails aggregates one at a time, each in one
// Complete (FAILED, its dead letter and its blocked follower together),
// while snapshots are taken: every snapshot must see them all or none.
// Figures read by separate statements outside one transaction disagree
// here sooner or later.
func testSnapshotAgreesUnderWrites(t *testing.T, h *Harness) {
	ctx := context.Background()
	n := Scaled(h, 40)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := range n {
			agg := "agree-" + strconv.Itoa(i)
			if _, err := enqueueErr(h, PaymentEvent(agg, 1), PaymentEvent(agg, 2)); err != nil {
				t.Errorf("enqueue: %v", err)
				return
			}
			c, err := h.Store.Claim(ctx, store.ClaimRequest{RelayID: "test", Limit: 10, Lease: time.Minute, FailedBlocks: true})
			if err != nil || len(c.Events) != 2 {
				t.Errorf("claim: %v (%d events, want 2)", err, len(c.Events))
				return
			}
			outs := outcomes(c, store.Failed)
			outs[1].Kind, outs[1].Block, outs[1].Attempted = store.Released, true, false
			if _, err := h.Store.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "test", FailedBlocks: true, Outcomes: outs}); err != nil {
				t.Errorf("complete: %v", err)
				return
			}
		}
	}()
	snaps := 0
	for finished := false; !finished; snaps++ {
		select {
		case <-done:
			finished = true
		default:
		}
		snap, err := h.Store.Snapshot(ctx, store.SnapshotRequest{FailedBlocks: true})
		if err != nil {
			t.Errorf("snapshot: %v", err)
			break
		}
		failed, blocked := snap.Counts[outbox.StatusFailed], snap.Counts[outbox.StatusBlocked]
		if failed != snap.DeadLetters || failed != snap.BlockedAggregateCount || failed != blocked {
			t.Errorf("snapshot disagrees: FAILED %d, dead letters %d, blocked aggregates %d, BLOCKED events %d",
				failed, snap.DeadLetters, snap.BlockedAggregateCount, blocked)
			break
		}
	}
	wg.Wait()
	final := snapshot(t, h, store.SnapshotRequest{FailedBlocks: true})
	if final.Counts[outbox.StatusFailed] != int64(n) || final.DeadLetters != int64(n) || final.BlockedAggregateCount != int64(n) {
		t.Errorf("after %d failures: FAILED %d, dead letters %d, blocked aggregates %d", n,
			final.Counts[outbox.StatusFailed], final.DeadLetters, final.BlockedAggregateCount)
	}
	t.Logf("%d snapshots during %d failures", snaps, n)
}

// testGaugeLeaseIsExclusive: one holder at a time; released, it passes on.
func testGaugeLeaseExclusive(t *testing.T, h *Harness) {
	leaser := h.Store.Features().GaugeLeaser
	if leaser == nil {
		t.Skipf("%T has no gauge lease (one relay per database)", h.Store)
	}
	ctx := context.Background()
	first, ok, err := leaser.TryGaugeLease(ctx)
	if err != nil || !ok {
		t.Fatalf("first lease: ok %v, err %v", ok, err)
	}
	held := true
	t.Cleanup(func() {
		if held {
			first.Release()
		}
	})
	if _, ok, err := leaser.TryGaugeLease(ctx); err != nil || ok {
		t.Fatalf("second lease while the first is held: ok %v, err %v; want refused", ok, err)
	}
	if h.NewStore != nil { // another Store (another pool), as another process would have
		other := h.NewStore(t, outbox.Limits{}).Features().GaugeLeaser
		if other == nil {
			t.Fatal("a second store on the same tables declares no gauge lease")
		}
		if _, ok, err := other.TryGaugeLease(ctx); err != nil || ok {
			t.Fatalf("lease from another store while the first is held: ok %v, err %v; want refused", ok, err)
		}
	}
	snap, err := first.Snapshot(ctx, store.SnapshotRequest{FailedBlocks: true, Full: true})
	if err != nil || snap.Counts == nil {
		t.Fatalf("snapshot on the lease: %v", err)
	}
	first.Release()
	held = false
	second, ok, err := leaser.TryGaugeLease(ctx)
	if err != nil || !ok {
		t.Fatalf("lease after release: ok %v, err %v", ok, err)
	}
	second.Release()
}

func enqueueErr(h *Harness, events ...outbox.Event) ([]outbox.EventID, error) {
	ctx := context.Background()
	tx, err := h.Begin(ctx)
	if err != nil {
		return nil, err
	}
	ids, err := tx.Enqueue(ctx, events...)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return ids, tx.Commit(ctx)
}
