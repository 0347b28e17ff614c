package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// A batch of exactly two INSERTs' worth of events (1000 rows each) goes in
// whole, in id order.
func TestEnqueueExactMultipleOfTheInsertSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	il := newInterleaving(t)
	var events []outbox.Event
	for i := 0; i < 2000; i++ {
		events = append(events, payment(fmt.Sprintf("bulk-%d", i%7), i))
	}
	tx, err := il.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ids, err := il.main.Enqueue(ctx, tx, events...)
	if err != nil || len(ids) != 2000 {
		t.Fatalf("Enqueue of 2000 events: %d ids, %v", len(ids), err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := il.main.Stats(ctx, true)
	if err != nil || st.Counts[outbox.StatusPending] != 2000 {
		t.Fatalf("stats %+v (%v), want 2000 PENDING", st.Counts, err)
	}
}

// An insert the database refuses (here a repeated event id) is Enqueue's
// error, whether or not Enqueue would send a NOTIFY: it is never
// reported as written.
func TestEnqueueReturnsTheDatabasesRefusal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	il := newInterleaving(t) // NoNotify: no statement after the INSERT
	e := payment("dup", 1)
	e.ID = outbox.NewEventID()
	for i, want := range []bool{true, false} {
		tx, err := il.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = il.main.Enqueue(ctx, tx, e)
		if ok := err == nil; ok != want {
			tx.Rollback(ctx)
			t.Fatalf("Enqueue #%d of event %s: err %v, want success %v", i+1, e.ID, err, want)
		}
		if err == nil {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			tx.Rollback(ctx)
		}
	}
	if recs, err := il.main.ListEvents(ctx, store.ListFilter{AggregateID: "dup"}); err != nil || len(recs) != 1 {
		t.Fatalf("%d rows of the event (%v), want 1", len(recs), err)
	}
}
