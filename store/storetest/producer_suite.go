package storetest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// RunProducers runs the producer contract of docs/PRODUCERS.md: every
// event gets aggregate_seq 1, 2, 3 ... per aggregate without gaps, whoever
// writes it, and a plain SQL INSERT of the documented columns is enough.
// (That concurrent plain-SQL producers of one aggregate are delivered in
// their commit order is checked through the relay by relay/relaytest.)
// The tests that write plain SQL skip when Harness.SQL is nil.
func RunProducers(t *testing.T, newHarness Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"PlainInsertOfDocumentedColumns", testPlainInsert},
		{"SeqGapFreeUnderConcurrentEnqueue", testSeqConcurrentEnqueue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

// PlainInsertSQL is the documented minimal INSERT of a producer, with the
// harness's placeholders.
func PlainInsertSQL(h *Harness) string {
	q := "INSERT INTO " + h.Table + " (aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, ?)"
	if h.Bind != nil {
		q = h.Bind(q)
	}
	return q
}

// NeedSQL skips the test when the harness gives no database/sql handle
// for plain-SQL producers.
func NeedSQL(t *testing.T, h *Harness) {
	t.Helper()
	if h.SQL == nil || h.Table == "" {
		t.Skip("the harness gives no database/sql handle for plain-SQL producers")
	}
}

// claimAllDeliver claims until nothing is due, marks every claimed event
// delivered, and returns them in claim order.
func claimAllDeliver(t *testing.T, h *Harness) []store.Claimed {
	t.Helper()
	ctx := context.Background()
	var out []store.Claimed
	for {
		c, err := h.Store.Claim(ctx, store.ClaimRequest{RelayID: "producers", Limit: 500, Lease: time.Minute, FailedBlocks: true})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if len(c.Events) == 0 {
			return out
		}
		req := store.CompleteRequest{Token: c.Token, RelayID: "producers", FailedBlocks: true}
		for _, e := range c.Events {
			req.Outcomes = append(req.Outcomes, store.Outcome{ID: e.ID, EventID: e.EventID, Kind: store.Delivered,
				Attempt: e.Attempt, Attempted: true, StartedAt: c.DBTime, FinishedAt: c.DBTime})
		}
		if _, err := h.Store.Complete(ctx, req); err != nil {
			t.Fatalf("complete: %v", err)
		}
		out = append(out, c.Events...)
	}
}

func testPlainInsert(t *testing.T, h *Harness) {
	NeedSQL(t, h)
	ctx := context.Background()
	insert := PlainInsertSQL(h)
	if _, err := h.SQL.ExecContext(ctx, insert, "payment", "tx-plain", "ApprovalRequested", `{"n":1}`); err != nil {
		t.Fatalf("a plain INSERT of aggregate_type, aggregate_id, event_type and payload: %v", err)
	}
	goIDs := Enqueue(t, h, PaymentEvent("tx-plain", 2))
	if _, err := h.SQL.ExecContext(ctx, insert, "payment", "tx-plain", "ApprovalRequested", `{"n":3}`); err != nil {
		t.Fatal(err)
	}
	// Immediately due: available_at is the database's now, in UTC.
	got := claimAllDeliver(t, h)
	if len(got) != 3 {
		t.Fatalf("claimed %d events, want the 3 just written, due at once", len(got))
	}
	seen := map[outbox.EventID]bool{}
	for i, e := range got {
		if want := int64(i + 1); e.AggregateSeq != want {
			t.Errorf("event %d (id %d): aggregate_seq %d, want %d", i, e.ID, e.AggregateSeq, want)
		}
		if e.EventID.IsZero() || seen[e.EventID] {
			t.Errorf("event %d: event_id %s is empty or repeated", i, e.EventID)
		}
		seen[e.EventID] = true
		if v := e.EventID[6] >> 4; v != 7 || e.EventID[8]&0xc0 != 0x80 {
			t.Errorf("event %d: event_id %s is not a UUIDv7 (version %d, variant byte %#x)", i, e.EventID, v, e.EventID[8])
		}
		if len(e.Headers) != 0 {
			t.Errorf("event %d: headers %v, want none", i, e.Headers)
		}
		if d := e.CreatedAt.Sub(time.Now()); d < -time.Minute || d > time.Minute {
			t.Errorf("event %d: created_at %s is %s from now: not UTC now", i, e.CreatedAt, d)
		}
	}
	if got[1].EventID != goIDs[0] {
		t.Errorf("the Enqueue event is not the second of the aggregate: %s, want %s", got[1].EventID, goIDs[0])
	}
	// A plain INSERT that leaves out a required column fails, naming it.
	bad := "INSERT INTO " + h.Table + " (aggregate_type, event_type, payload) VALUES (?, ?, ?)"
	if h.Bind != nil {
		bad = h.Bind(bad)
	}
	if _, err := h.SQL.ExecContext(ctx, bad, "payment", "E", `{}`); err == nil {
		t.Error("an INSERT without aggregate_id was accepted")
	}
}

func testSeqConcurrentEnqueue(t *testing.T, h *Harness) {
	ctx := context.Background()
	const producers, aggregates = 8, 5
	perProducer := Scaled(h, 30)
	var writeMu sync.Mutex // SingleWriter: one open write transaction at a time
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perProducer; i++ {
				if h.SingleWriter {
					writeMu.Lock()
				}
				produce := func() error {
					tx, err := h.Begin(ctx)
					if err != nil {
						return err
					}
					// Two events: one aggregate, and (every other tx) a second one.
					evs := []outbox.Event{PaymentEvent(fmt.Sprintf("seq-%d", (p+i)%aggregates), p*1000+i)}
					if i%2 == 0 {
						evs = append(evs, PaymentEvent(fmt.Sprintf("seq-%d", (p+i+1)%aggregates), p*1000+i))
					}
					if _, err := tx.Enqueue(ctx, evs...); err != nil {
						_ = tx.Rollback(ctx)
						return err
					}
					if i%5 == 4 { // rolled back: its numbers must not leave a gap
						return tx.Rollback(ctx)
					}
					return tx.Commit(ctx)
				}
				err := produce()
				// A deadlock rolled the transaction back: retried as a
				// whole, as an application does (its numbers, too, must
				// leave no gap).
				for try := 1; err != nil && h.Conflict != nil && h.Conflict(err) && try < 20; try++ {
					err = produce()
				}
				if h.SingleWriter {
					writeMu.Unlock()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("producer: %v", err)
	}
	checkGapFree(t, claimAllDeliver(t, h))
}

// checkGapFree checks that each aggregate's events, in id order, are
// numbered 1, 2, 3 ...
func checkGapFree(t *testing.T, events []store.Claimed) {
	t.Helper()
	sort.Slice(events, func(i, j int) bool { return events[i].ID < events[j].ID })
	next := map[string]int64{}
	for _, e := range events {
		k := e.OrderingKey()
		next[k]++
		if e.AggregateSeq != next[k] {
			t.Fatalf("aggregate %q: event id %d has aggregate_seq %d, want %d (gap or reorder)", e.AggregateID, e.ID, e.AggregateSeq, next[k])
		}
	}
	if len(next) == 0 {
		t.Fatal("no events")
	}
}
