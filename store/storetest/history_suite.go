package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// RunHistory checks the history (docs/HISTORY.md): finished events move
// out of the hot table with their attempts and their receipts, read back
// from the history,
// unfinished events never move, an enqueue of a moved event id is a new
// event, and retention drops whole months only.
func RunHistory(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"MoveAndReadBack", testHistoryMoveAndReadBack},
		{"UnfinishedNeverMoves", testHistoryUnfinishedStays},
		{"EnqueueOfAMovedEventID", testHistoryEnqueueMovedID},
		{"RetentionDropsWholeMonths", testHistoryRetentionMonths},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

func moveToHistory(t testing.TB, h *Harness, req store.HistoryMoveRequest) int64 {
	t.Helper()
	n, err := h.Store.MoveToHistory(context.Background(), req)
	if err != nil {
		t.Fatalf("move to history: %v", err)
	}
	return n
}

func testHistoryMoveAndReadBack(t *testing.T, h *Harness) {
	ctx := context.Background()
	ids := Enqueue(t, h, PaymentEvent("hm-a", 1), PaymentEvent("hm-b", 1))
	// hm-a is retried once, then delivered: two attempts, one of each,
	// each with its receipt; hm-b is delivered with its receipt in the
	// first batch.
	retryReceipt, deliveredReceipt, bReceipt := receiptOf("hm-a-retry", 504), receiptOf("hm-a", 200), receiptOf("hm-b", 201)
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 2 {
		t.Fatalf("claimed %d events, want 2", len(c.Events))
	}
	outs := outcomes(c, store.Delivered)
	for i := range outs {
		if outs[i].EventID == ids[0] {
			outs[i].Kind, outs[i].Error, outs[i].Receipt = store.Retry, "gateway timeout", retryReceipt
		} else {
			outs[i].Receipt = bReceipt
		}
	}
	complete(t, h.Store, c, true, outs)
	var retried *store.Claim
	waitFor(t, 10*time.Second, "the retried event due again", func() (bool, error) {
		retried = claim(t, h.Store, 10, time.Minute, true)
		return len(retried.Events) == 1, nil
	})
	outs = outcomes(retried, store.Delivered)
	outs[0].Receipt = deliveredReceipt
	complete(t, h.Store, retried, true, outs)
	before, err := h.Store.Attempts(ctx, ids[0])
	if err != nil || len(before) != 2 || string(before[0].Receipt) != string(retryReceipt) ||
		string(before[1].Receipt) != string(deliveredReceipt) {
		t.Fatalf("attempts before the move = %+v, %v; want RETRY then DELIVERED, with their receipts", before, err)
	}
	beforeB, err := h.Store.Attempts(ctx, ids[1])
	if err != nil || len(beforeB) != 1 || string(beforeB[0].Receipt) != string(bReceipt) {
		t.Fatalf("attempts of hm-b before the move = %+v, %v; want its delivery with its receipt", beforeB, err)
	}
	hot, err := h.Store.GetEvent(ctx, ids[0])
	if err != nil || hot.FromHistory {
		t.Fatalf("event before the move = %+v, %v; want it from the hot table", hot, err)
	}

	if n := moveToHistory(t, h, store.HistoryMoveRequest{OlderThan: time.Hour}); n != 0 {
		t.Fatalf("moved %d events younger than the age; want 0", n)
	}
	var progress int64
	if n := moveToHistory(t, h, store.HistoryMoveRequest{BatchSize: 1, Progress: func(m int64) { progress += m }}); n != 2 || progress != 2 {
		t.Fatalf("moved %d events (progress %d); want the 2 PROCESSED ones", n, progress)
	}
	st, err := h.Store.Stats(ctx, true)
	if err != nil || st.Counts[outbox.StatusProcessed] != 0 {
		t.Fatalf("hot table after the move: %v, %v; want no PROCESSED row left", st.Counts, err)
	}
	got, err := h.Store.GetEvent(ctx, ids[0])
	if err != nil {
		t.Fatalf("get a moved event: %v", err)
	}
	if !got.FromHistory || got.Status != outbox.StatusProcessed || got.EventID != ids[0] || string(got.Payload) != string(hot.Payload) ||
		got.AggregateID != "hm-a" || got.RetryCount != 1 || got.ProcessedAt.IsZero() || !got.CreatedAt.Equal(hot.CreatedAt) {
		t.Fatalf("moved event read back = %+v; want it from history as it was: %+v", got, hot)
	}
	after, err := h.Store.Attempts(ctx, ids[0])
	if err != nil || len(after) != 2 {
		t.Fatalf("attempts from history = %+v, %v; want the 2 attempts", after, err)
	}
	afterB, err := h.Store.Attempts(ctx, ids[1])
	if err != nil || len(afterB) != 1 {
		t.Fatalf("attempts of hm-b from history = %+v, %v; want its delivery", afterB, err)
	}
	// Each attempt reads back as it was, its receipt byte for byte (and
	// none where there was none).
	wantAll := append(append([]store.Attempt(nil), before...), beforeB...)
	gotAll := append(append([]store.Attempt(nil), after...), afterB...)
	for i, b := range wantAll {
		a := gotAll[i]
		if a.Attempt != b.Attempt || a.Outcome != b.Outcome || a.RelayID != b.RelayID || a.ClaimToken != b.ClaimToken ||
			a.Error != b.Error || !a.StartedAt.Equal(b.StartedAt) || !a.FinishedAt.Equal(b.FinishedAt) {
			t.Fatalf("attempt %d from history = %+v; want %+v", i, a, b)
		}
		if string(a.Receipt) != string(b.Receipt) || (a.Receipt == nil) != (b.Receipt == nil) {
			t.Fatalf("attempt %d (%s) from history has receipt %q; want %q", i, a.Outcome, a.Receipt, b.Receipt)
		}
	}
	if n := moveToHistory(t, h, store.HistoryMoveRequest{}); n != 0 {
		t.Fatalf("a second move moved %d events; want 0", n)
	}
	if months, err := h.Store.HistoryMonths(ctx); err != nil || len(months) == 0 {
		t.Fatalf("history months = %+v, %v; want this month", months, err)
	}
	// The aggregates keep counting and the lanes keep delivering: a new
	// event of hm-a is its second, and is claimed.
	Enqueue(t, h, PaymentEvent("hm-a", 2))
	next := claim(t, h.Store, 10, time.Minute, true)
	if len(next.Events) != 1 || next.Events[0].AggregateID != "hm-a" || next.Events[0].AggregateSeq != 2 {
		t.Fatalf("claim after the move = %+v; want hm-a's second event (aggregate seq 2)", next.Events)
	}
	complete(t, h.Store, next, true, outcomes(next, store.Delivered))
}

func testHistoryUnfinishedStays(t *testing.T, h *Harness) {
	ctx := context.Background()
	ids := Enqueue(t, h, PaymentEvent("hu-failed", 1), PaymentEvent("hu-failed", 2), PaymentEvent("hu-claimed", 1),
		PaymentEvent("hu-pending", 1))
	c := claim(t, h.Store, 10, time.Minute, true)
	var failed []store.Outcome
	for _, o := range outcomes(c, store.Failed) {
		if o.EventID == ids[0] {
			failed = append(failed, o)
		}
	}
	// hu-failed's first event FAILS (its second waits BLOCKED behind it),
	// hu-claimed stays PROCESSING under the claim, hu-pending stays PENDING
	// (released).
	rel := outcomes(c, store.Released)
	var rest []store.Outcome
	for _, o := range rel {
		if o.EventID == ids[3] || o.EventID == ids[1] {
			o.Attempted = false
			rest = append(rest, o)
		}
	}
	complete(t, h.Store, c, true, append(failed, rest...))
	if n := moveToHistory(t, h, store.HistoryMoveRequest{}); n != 0 {
		t.Fatalf("moved %d unfinished events; want 0", n)
	}
	for _, id := range ids {
		r, err := h.Store.GetEvent(ctx, id)
		if err != nil || r.FromHistory || r.Status.Final() && r.Status != outbox.StatusFailed {
			t.Fatalf("event %s after a move = %+v, %v; want it unfinished (or FAILED) in the hot table", id, r, err)
		}
	}
	// Once an operator skips the FAILED event it is finished: it moves,
	// with its attempts (the failure and the operator's row).
	if err := h.Store.Skip(ctx, store.OperatorAction{EventID: ids[0], Actor: "alice", Reason: "refunded by hand"}); err != nil {
		t.Fatal(err)
	}
	if n := moveToHistory(t, h, store.HistoryMoveRequest{}); n != 1 {
		t.Fatalf("moved %d after the skip; want the SKIPPED event alone", n)
	}
	r, err := h.Store.GetEvent(ctx, ids[0])
	if err != nil || !r.FromHistory || r.Status != outbox.StatusSkipped {
		t.Fatalf("skipped event after the move = %+v, %v; want it SKIPPED from history", r, err)
	}
	atts, err := h.Store.Attempts(ctx, ids[0])
	if err != nil || len(atts) != 2 || atts[0].Outcome != store.Failed || atts[1].Outcome != store.Skipped {
		t.Fatalf("attempts of the skipped event from history = %+v, %v; want FAILED then SKIPPED", atts, err)
	}
	if r, err := h.Store.GetEvent(ctx, ids[1]); err != nil || r.FromHistory {
		t.Fatalf("the event behind the skipped one = %+v, %v; want it in the hot table", r, err)
	}
}

func testHistoryEnqueueMovedID(t *testing.T, h *Harness) {
	ctx := context.Background()
	e := PaymentEvent("he-a", 1)
	e.ID = outbox.NewEventID()
	Enqueue(t, h, e)
	// While the event is in the hot table, an enqueue of its id again is
	// refused (the table's unique event id) and writes nothing.
	if err := enqueueOnce(h, e); err == nil {
		t.Fatal("an enqueue of an event id the hot table holds was accepted")
	}
	c := claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 1 {
		t.Fatalf("claimed %d events for one event id enqueued twice; want 1", len(c.Events))
	}
	complete(t, h.Store, c, true, outcomes(c, store.Delivered))
	if n := moveToHistory(t, h, store.HistoryMoveRequest{}); n != 1 {
		t.Fatalf("moved %d; want 1", n)
	}
	// Once it moved, the same id is a new event: the window of the
	// idempotent enqueue is the time an event stays in the hot table.
	Enqueue(t, h, e)
	r, err := h.Store.GetEvent(ctx, e.ID)
	if err != nil || r.FromHistory || r.Status != outbox.StatusPending {
		t.Fatalf("event id enqueued again after its move = %+v, %v; want a new PENDING event in the hot table", r, err)
	}
	c = claim(t, h.Store, 10, time.Minute, true)
	if len(c.Events) != 1 || c.Events[0].EventID != e.ID {
		t.Fatalf("claim after the enqueue again = %+v; want the event once more", c.Events)
	}
	complete(t, h.Store, c, true, outcomes(c, store.Delivered))
	if n := moveToHistory(t, h, store.HistoryMoveRequest{}); n != 1 {
		t.Fatalf("moved the second delivery of the id: %d; want 1", n)
	}
}

func testHistoryRetentionMonths(t *testing.T, h *Harness) {
	if h.SetFinishedAt == nil {
		t.Skip("the harness cannot set a finish time")
	}
	ctx := context.Background()
	ids := Enqueue(t, h, PaymentEvent("hr-old", 1), PaymentEvent("hr-new", 1))
	c := claim(t, h.Store, 10, time.Minute, true)
	complete(t, h.Store, c, true, outcomes(c, store.Delivered))
	thisMonth := store.MonthStart(time.Now())
	old := thisMonth.AddDate(0, -2, 3)
	h.SetFinishedAt(t, ids[0], old)
	if n := moveToHistory(t, h, store.HistoryMoveRequest{}); n != 2 {
		t.Fatalf("moved %d; want 2", n)
	}
	months, err := h.Store.HistoryMonths(ctx)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, m := range months {
		have[m.Label()] = true
	}
	if !have[store.MonthStart(old).Format("2006-01")] || !have[thisMonth.Format("2006-01")] {
		t.Fatalf("history months = %+v; want %s and this month", months, old.Format("2006-01"))
	}
	// A cutoff inside a month keeps that month whole.
	drop, err := h.Store.DropHistoryBefore(ctx, old.AddDate(0, 0, 1))
	if err != nil || len(drop.Months) != 0 {
		t.Fatalf("drop before a day inside the old month = %+v, %v; want nothing dropped", drop, err)
	}
	if r, err := h.Store.GetEvent(ctx, ids[0]); err != nil || !r.FromHistory {
		t.Fatalf("old event after a drop that kept its month = %+v, %v", r, err)
	}
	drop, err = h.Store.DropHistoryBefore(ctx, thisMonth.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// The old month goes, with its one event; a backend may have kept
	// empty months between it and this one, which go too. Every month
	// dropped ends at or before the cutoff.
	droppedOld := false
	for _, m := range drop.Months {
		if m.End().After(drop.Cutoff) {
			t.Fatalf("drop before this month dropped %s, which ends after the cutoff: %+v", m.Label(), drop)
		}
		droppedOld = droppedOld || m.Month.Equal(store.MonthStart(old))
	}
	if !droppedOld || drop.Events() != 1 {
		t.Fatalf("drop before this month = %+v; want the old month, with its 1 event", drop)
	}
	if _, err := h.Store.GetEvent(ctx, ids[0]); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("event of a dropped month: %v; want not found", err)
	}
	if r, err := h.Store.GetEvent(ctx, ids[1]); err != nil || !r.FromHistory {
		t.Fatalf("event of this month after the drop = %+v, %v; want it kept", r, err)
	}
	if atts, err := h.Store.Attempts(ctx, ids[1]); err != nil || len(atts) != 1 || atts[0].Outcome != store.Delivered {
		t.Fatalf("attempts of this month's event after the drop = %+v, %v; want its delivery", atts, err)
	}
	if drop, err := h.Store.DropHistoryBefore(ctx, thisMonth.Add(time.Hour)); err != nil || len(drop.Months) != 0 {
		t.Fatalf("the same drop again = %+v, %v; want nothing", drop, err)
	}
}

// enqueueOnce enqueues e in a transaction of its own and returns the error
// of the enqueue or of the commit (the transaction is rolled back then).
func enqueueOnce(h *Harness, e outbox.Event) error {
	ctx := context.Background()
	tx, err := h.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Enqueue(ctx, e); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return nil
}
