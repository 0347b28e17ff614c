package storetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/store"
)

// RunFanOut checks the fan-out's part of the Store: CopyEvents from one
// outbox table into another of the same database (the source is a harness
// of newHarness, the destination one of its Harness.NewTable), and
// EventTypes.
func RunFanOut(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, src, dst *Harness)
	}{
		{"CopyKeepsEveryCarriedField", testCopyKeepsFields},
		{"CopyKeepsSourceOrderAndIsDeliverable", testCopyOrder},
		{"CopyIsIdempotent", testCopyIdempotent},
		{"CopyRefusesAndIgnores", testCopyRefusesAndIgnores},
		{"CopyTellsRelays", testCopyTellsRelays},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := newHarness(t)
			if src.NewTable == nil {
				t.Fatal("RunFanOut needs Harness.NewTable: a harness on a second outbox table of the same database")
			}
			tc.fn(t, src, src.NewTable(t))
		})
	}
	t.Run("EventTypes", func(t *testing.T) {
		t.Parallel()
		testEventTypes(t, newHarness(t))
	})
}

// rowIDs returns the outbox row ids of the events ids of h.
func rowIDs(t testing.TB, h *Harness, ids ...outbox.EventID) []int64 {
	t.Helper()
	out := make([]int64, len(ids))
	for i, id := range ids {
		r, err := h.Store.GetEvent(context.Background(), id)
		if err != nil {
			t.Fatalf("get event %s: %v", id, err)
		}
		out[i] = r.ID
	}
	return out
}

// copyEvents copies the rows ids of src into dst and checks that the copy
// wrote want events.
func copyEvents(t testing.TB, src, dst *Harness, ids []int64, want int64) {
	t.Helper()
	n, err := dst.Store.CopyEvents(context.Background(), src.Table, ids)
	if err != nil {
		t.Fatalf("copy events %v: %v", ids, err)
	}
	if n != want {
		t.Fatalf("copy events %v wrote %d events, want %d", ids, n, want)
	}
}

// testCopyKeepsFields: a copy keeps the event id, aggregate, event type,
// payload bytes, headers, created_at, deadline and compensating event of
// its source row, and starts PENDING, due now, with no retry counted and
// an aggregate sequence of its own table.
func testCopyKeepsFields(t *testing.T, src, dst *Harness) {
	ctx := context.Background()
	// A source row that failed once: its copy starts afresh.
	failing := PaymentEvent("fail", 1)
	failing.EventType = "Declined"
	failedID := Enqueue(t, src, failing)[0]
	c := claim(t, src.Store, 10, time.Minute, true)
	if len(c.Events) != 1 {
		t.Fatalf("claimed %d source events, want the one to fail", len(c.Events))
	}
	complete(t, src.Store, c, true, outcomes(c, store.Failed))

	kept := outbox.Event{
		AggregateType: "payment", AggregateID: "keep", EventType: "Captured",
		Payload:   []byte(`{"b": 2, "a": [1, 2.50, "x"]}`),
		Headers:   map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "X-Tenant": "t1"},
		ExpiresAt: time.Now().Add(time.Hour).Truncate(time.Millisecond),
		OnExpired: &outbox.Compensation{EventType: "CaptureExpired", Payload: []byte(`{"why":"late"}`)},
	}
	// The aggregate's first event stays behind: the copy is the first of
	// its aggregate in the destination.
	keepIDs := Enqueue(t, src, PaymentEvent("keep", 0), kept)
	expiring := WithCompensation(PaymentEvent("exp", 1), `{"reason":"qr code expired"}`)
	expID := Enqueue(t, src, expiring)[0]

	events := []outbox.EventID{failedID, keepIDs[1], expID}
	copyEvents(t, src, dst, rowIDs(t, src, events...), 3)
	copied := time.Now()

	for _, id := range events {
		s, err := src.Store.GetEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		d, err := dst.Store.GetEvent(ctx, id)
		if err != nil {
			t.Fatalf("the copy of %s: %v", id, err)
		}
		if d.EventID != s.EventID || d.AggregateType != s.AggregateType || d.AggregateID != s.AggregateID || d.EventType != s.EventType {
			t.Errorf("copy %s %s/%s %s, want the source's %s %s/%s %s", d.EventID, d.AggregateType, d.AggregateID, d.EventType,
				s.EventID, s.AggregateType, s.AggregateID, s.EventType)
		}
		if string(d.Payload) != string(s.Payload) {
			t.Errorf("%s: copy's payload %s, want the source's bytes %s", id, d.Payload, s.Payload)
		}
		if !maps.Equal(d.Headers, s.Headers) {
			t.Errorf("%s: copy's headers %v, want the source's %v", id, d.Headers, s.Headers)
		}
		if !d.CreatedAt.Equal(s.CreatedAt) || !d.ExpiresAt.Equal(s.ExpiresAt) {
			t.Errorf("%s: copy created %v expires %v, want the source's %v and %v", id, d.CreatedAt, d.ExpiresAt, s.CreatedAt, s.ExpiresAt)
		}
		if d.Status != outbox.StatusPending || d.RetryCount != 0 || d.LastError != "" {
			t.Errorf("%s: copy %s, retry %d, error %q; want PENDING, retry 0, no error", id, d.Status, d.RetryCount, d.LastError)
		}
		if d.AvailableAt.Before(s.CreatedAt) || d.AvailableAt.After(copied.Add(time.Minute)) {
			t.Errorf("%s: copy due at %v, want the copy's time (source created %v, copied by %v)", id, d.AvailableAt, s.CreatedAt, copied)
		}
	}
	if s, _ := src.Store.GetEvent(ctx, failedID); s.Status != outbox.StatusFailed || s.RetryCount != 1 {
		t.Fatalf("the source row is %s with retry %d, want FAILED with retry 1 (the copy must start afresh from it)", s.Status, s.RetryCount)
	}
	if r, _ := dst.Store.GetEvent(ctx, keepIDs[1]); string(r.Payload) != string(kept.Payload) || r.Headers["X-Tenant"] != "t1" ||
		!r.ExpiresAt.Equal(kept.ExpiresAt) {
		t.Errorf("copy payload %s, headers %v, expires %v; want %s, the enqueued headers, %v", r.Payload, r.Headers, r.ExpiresAt, kept.Payload, kept.ExpiresAt)
	}

	// The compensating event came along: the copy whose deadline passed
	// expires in the destination and enqueues it there.
	wait.Until(t, time.Minute, "the destination's sweeper to expire the copy past its deadline", func() (bool, error) {
		if _, err := dst.Store.Sweep(ctx, store.SweepRequest{RelayID: "sweeper", FailedBlocks: true}); err != nil {
			return false, err
		}
		r, err := dst.Store.GetEvent(ctx, expID)
		return r.Status == outbox.StatusExpired, err
	})
	CheckCompensated(t, dst, "exp", expID, `{"reason":"qr code expired"}`)

	// The copies are due now and numbered in their own table: "keep"'s
	// copy is the first of its aggregate there (the source numbered it 2).
	got := claimAllDeliver(t, dst)
	seq := map[outbox.EventID]int64{}
	for _, e := range got {
		seq[e.EventID] = e.AggregateSeq
	}
	if seq[keepIDs[1]] != 1 || seq[failedID] != 1 {
		t.Errorf("destination aggregate_seq of the copies %v, want 1 for each (the destination's own numbering)", seq)
	}
}

// testCopyOrder: copies written in two calls, each given its ids out of
// order, are claimed in source id order, numbered 1, 2, 3 ... per
// aggregate, and delivered.
func testCopyOrder(t *testing.T, src, dst *Harness) {
	var ids []outbox.EventID
	for i, agg := range []string{"o", "p", "o", "o", "p", "o"} {
		ids = append(ids, Enqueue(t, src, PaymentEvent(agg, i))...)
	}
	// One event of another aggregate the copies leave behind.
	Enqueue(t, src, PaymentEvent("left", 0))
	rows := rowIDs(t, src, ids...)
	first, second := slices.Clone(rows[:3]), slices.Clone(rows[3:])
	slices.Reverse(first)
	slices.Reverse(second)
	copyEvents(t, src, dst, first, 3)
	copyEvents(t, src, dst, second, 3)

	got := claimAllDeliver(t, dst)
	if len(got) != len(ids) {
		t.Fatalf("claimed %d copies, want %d", len(got), len(ids))
	}
	perAggregate := map[string][]outbox.EventID{}
	for _, e := range got {
		perAggregate[e.AggregateID] = append(perAggregate[e.AggregateID], e.EventID)
	}
	for agg, want := range map[string][]outbox.EventID{"o": {ids[0], ids[2], ids[3], ids[5]}, "p": {ids[1], ids[4]}} {
		if !slices.Equal(perAggregate[agg], want) {
			t.Errorf("aggregate %s claimed %v, want the source order %v", agg, perAggregate[agg], want)
		}
	}
	byRow := slices.Clone(got)
	slices.SortFunc(byRow, func(a, b store.Claimed) int { return int(a.ID - b.ID) })
	for i, e := range byRow {
		if e.EventID != ids[i] {
			t.Fatalf("destination row %d holds %s, want %s: copies must get ids in source id order", e.ID, e.EventID, ids[i])
		}
	}
	checkGapFree(t, got)
	if n := CountStatus(t, dst.Store, outbox.StatusProcessed); n != int64(len(ids)) {
		t.Errorf("%d copies PROCESSED after delivery, want %d", n, len(ids))
	}
	if n := CountStatus(t, src.Store, outbox.StatusPending); n != int64(len(ids)+1) {
		t.Errorf("%d source events PENDING, want %d: the copy must not change its source", n, len(ids)+1)
	}
}

// testCopyIdempotent: copying ids again adds nothing; a mix of copied and
// new ids copies the new ones only, and the destination numbers each
// aggregate without gaps.
func testCopyIdempotent(t *testing.T, src, dst *Harness) {
	ids := Enqueue(t, src, PaymentEvent("i", 1), PaymentEvent("i", 2), PaymentEvent("j", 1))
	rows := rowIDs(t, src, ids...)
	copyEvents(t, src, dst, rows[:1], 1)
	copyEvents(t, src, dst, rows[:1], 0)
	copyEvents(t, src, dst, rows, 2)
	copyEvents(t, src, dst, rows, 0)
	if n := CountStatus(t, dst.Store, outbox.StatusPending); n != 3 {
		t.Fatalf("%d PENDING copies, want 3", n)
	}
	got := claimAllDeliver(t, dst)
	if len(got) != 3 {
		t.Fatalf("claimed %d copies, want 3 (each event once)", len(got))
	}
	checkGapFree(t, got)
	// Copying delivered copies' ids again adds nothing either.
	copyEvents(t, src, dst, rows, 0)
	if n := CountStatus(t, dst.Store, outbox.StatusPending); n != 0 {
		t.Fatalf("%d PENDING after copying delivered events again, want 0", n)
	}
}

// testCopyRefusesAndIgnores: ids not in the source are ignored, no ids
// copy nothing, and a source that is this store's own table, or no valid
// table name, is refused with outbox.ErrInvalidConfig.
func testCopyRefusesAndIgnores(t *testing.T, src, dst *Harness) {
	ctx := context.Background()
	ids := Enqueue(t, src, PaymentEvent("u", 1))
	rows := rowIDs(t, src, ids...)
	unknown := rows[0] + 1_000_000
	copyEvents(t, src, dst, []int64{unknown}, 0)
	copyEvents(t, src, dst, []int64{unknown, rows[0], -1}, 1)
	for _, none := range [][]int64{nil, {}} {
		if n, err := dst.Store.CopyEvents(ctx, src.Table, none); n != 0 || err != nil {
			t.Errorf("copy of no ids: %d, %v; want 0, nil", n, err)
		}
	}
	_, err := dst.Store.CopyEvents(ctx, dst.Table, rows)
	if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), dst.Table) {
		t.Errorf("copy from the store's own table: %v; want outbox.ErrInvalidConfig naming %s", err, dst.Table)
	}
	for _, bad := range []string{"", "no such-table", `x"; DROP TABLE y; --`, strings.Repeat("t", 200)} {
		if _, err := dst.Store.CopyEvents(ctx, bad, rows); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("copy from %q: %v; want outbox.ErrInvalidConfig", bad, err)
		}
	}
	missing := TableName("fanout_missing")
	if _, err := dst.Store.CopyEvents(ctx, missing, rows); err == nil || errors.Is(err, outbox.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), missing) {
		t.Errorf("copy from a table that does not exist: %v; want a database error naming %s", err, missing)
	}
	if n := CountStatus(t, dst.Store, outbox.StatusPending); n != 1 {
		t.Errorf("%d copies, want the 1 copied", n)
	}
}

// testCopyTellsRelays: a copy that wrote events tells the destination's
// relays as Enqueue does, where the store can (its EnqueueObserver and its
// Listener); one that wrote nothing tells no observer.
func testCopyTellsRelays(t *testing.T, src, dst *Harness) {
	f := dst.Store.Features()
	if f.EnqueueObserver == nil && f.Listener == nil {
		t.Skip("the store declares no EnqueueObserver and no Listener: relays find copies by polling")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rows := rowIDs(t, src, Enqueue(t, src, PaymentEvent("tell", 1), PaymentEvent("tell", 2))...)
	var calls atomic.Int64
	if f.EnqueueObserver != nil {
		defer f.EnqueueObserver.OnEnqueue(func() { calls.Add(1) })()
	}
	wakes := make(chan struct{}, 64)
	done := make(chan error, 1)
	if f.Listener != nil {
		go func() {
			done <- f.Listener.Listen(ctx, func() {
				select {
				case wakes <- struct{}{}:
				default:
				}
			})
		}()
		awaitWake(t, wakes, done, "once listening")
		for len(wakes) > 0 { // wake-ups from before the copy are not the one awaited
			<-wakes
		}
	}
	copyEvents(t, src, dst, rows[:1], 1)
	if f.EnqueueObserver != nil && calls.Load() != 1 {
		t.Errorf("observer ran %d times for one copy that wrote an event, want 1", calls.Load())
	}
	if f.Listener != nil {
		awaitWake(t, wakes, done, "after a copy committed")
	}
	copyEvents(t, src, dst, rows[:1], 0)
	if f.EnqueueObserver != nil && calls.Load() != 1 {
		t.Errorf("observer ran %d times after a copy that wrote nothing, want 1 (from before)", calls.Load())
	}
}

// awaitWake waits for a wake-up of a Listener (wakes) until 30 s pass or
// Listen returns (done).
func awaitWake(t testing.TB, wakes <-chan struct{}, done <-chan error, what string) {
	t.Helper()
	select {
	case <-wakes:
	case err := <-done:
		t.Fatalf("Listen returned %v before a wake-up %s", err, what)
	case <-time.After(30 * time.Second):
		t.Fatalf("no wake-up %s within 30s", what)
	}
}

// testEventTypes: EventTypes counts the unfinished events (PENDING,
// PROCESSING, BLOCKED, FAILED) per (event type, aggregate type), in byte
// order, and leaves out PROCESSED, EXPIRED and SKIPPED ones.
func testEventTypes(t *testing.T, h *Harness) {
	ctx := context.Background()
	got, err := h.Store.EventTypes(ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("event types of an empty outbox: %v, %v; want none", got, err)
	}
	ev := func(eventType, aggregateType, aggregateID string) outbox.Event {
		return outbox.Event{AggregateType: aggregateType, AggregateID: aggregateID, EventType: eventType, Payload: []byte(`{}`)}
	}
	gone := ev("Gone", "payment", "g1")
	gone.ExpiresAt = time.Now().Add(-time.Second)
	Enqueue(t, h, ev("Done", "payment", "d1"), ev("Failing", "payment", "f1"), ev("Skipped", "payment", "s1"), gone)
	var skipped outbox.EventID
	handled := 0
	wait.Until(t, time.Minute, "claims to take the 4 events to finish", func() (bool, error) {
		c, err := h.Store.Claim(ctx, store.ClaimRequest{RelayID: "test", Limit: 10, Lease: time.Minute, FailedBlocks: true})
		if err != nil || len(c.Events) == 0 {
			return false, err
		}
		outs := outcomes(c, store.Delivered)
		for i, e := range c.Events {
			switch e.EventType {
			case "Failing", "Skipped":
				outs[i].Kind, outs[i].Error = store.Failed, "test failed"
				if e.EventType == "Skipped" {
					skipped = e.EventID
				}
			case "Gone":
				outs[i].Kind, outs[i].Error = store.Expired, "test expired"
			}
		}
		if _, err := h.Store.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "test", FailedBlocks: true, Outcomes: outs}); err != nil {
			return false, err
		}
		handled += len(c.Events)
		return handled == 4, nil
	})
	if err := h.Store.Skip(ctx, store.OperatorAction{EventID: skipped, Actor: "test", Reason: "fan-out test"}); err != nil {
		t.Fatal(err)
	}
	Enqueue(t, h, ev("B", "payment", "b1"), ev("B", "payment", "b2"), ev("a", "payment", "a1"),
		ev("A", "payment", "A1"), ev("A", "order", "A2"), ev("Held", "payment", "f1"))
	// Claimed and not completed: PROCESSING, still unfinished.
	claim(t, h.Store, 2, time.Minute, true)

	want := []store.EventTypes{
		{EventType: "A", AggregateType: "order", Count: 1},
		{EventType: "A", AggregateType: "payment", Count: 1},
		{EventType: "B", AggregateType: "payment", Count: 2},
		{EventType: "Failing", AggregateType: "payment", Count: 1},
		{EventType: "Held", AggregateType: "payment", Count: 1},
		{EventType: "a", AggregateType: "payment", Count: 1},
	}
	got, err = h.Store.EventTypes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("event types\n got %v\nwant %v (unfinished only, by event type then aggregate type, byte order)", got, want)
	}
	for status, n := range map[outbox.Status]int64{outbox.StatusProcessed: 1, outbox.StatusExpired: 1, outbox.StatusSkipped: 1} {
		if c := CountStatus(t, h.Store, status); c != n {
			t.Errorf("%d events %s, want %d: the test's finished events are not as planned", c, status, n)
		}
	}
}
