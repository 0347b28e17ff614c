package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox/inbox"
)

// Cleanup deletes the ids older than the retention, in pages, and keeps
// the younger ones; a forgotten id is handled again. Sequences are kept
// unless SequenceRetention is set.
func TestCleanup(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ib := newInbox(t, b, inbox.Config{CleanupBatch: 2})
		e := newEffects(t, b)
		ids := make([]inbox.Message, 7)
		for i := range ids {
			ids[i] = inbox.Message{EventID: fmt.Sprintf("evt-%d", i), AggregateType: "payment", AggregateID: fmt.Sprintf("tx-%d", i), Seq: 1}
			handle(t, ib, e, "billing", ids[i])
		}
		// The first five are a day past the default retention, the last
		// two a day short of it.
		tb := ib.Tables()
		ageRows(t, b, tb.Inbox, "recorded_at", inbox.DefaultRetention+24*time.Hour, "event_id IN (?, ?, ?, ?, ?)", "evt-0", "evt-1", "evt-2", "evt-3", "evt-4")
		ageRows(t, b, tb.Inbox, "recorded_at", inbox.DefaultRetention-24*time.Hour, "event_id IN (?, ?)", "evt-5", "evt-6")
		ageRows(t, b, tb.Sequences, "updated_at", inbox.DefaultRetention+24*time.Hour, "")

		res, err := ib.Cleanup(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.IDs != 5 || res.Sequences != 0 {
			t.Fatalf("Cleanup deleted %+v, want 5 ids (in pages of 2) and no sequences", res)
		}
		if n := recorded(t, b, ib); n != 2 {
			t.Fatalf("%d ids left, want 2", n)
		}
		if got := handle(t, ib, e, "billing", ids[6]); got != inbox.Duplicate {
			t.Fatalf("an id inside the retention: %s, want duplicate", got)
		}
		if got := handle(t, ib, e, "billing", inbox.Message{EventID: "evt-0"}); got != inbox.Processed {
			t.Fatalf("an id past the retention: %s, want processed (forgotten)", got)
		}
		if res, err := ib.Cleanup(ctx); err != nil || res.IDs != 0 {
			t.Fatalf("a second Cleanup: %+v, %v; want nothing deleted", res, err)
		}

		// With SequenceRetention, idle aggregates are forgotten too.
		ib2, err := inbox.New(b.db, inbox.Config{Table: tb.Inbox, SequenceRetention: 7 * 24 * time.Hour, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := ib2.Cleanup(ctx); err != nil || res.Sequences != 7 {
			t.Fatalf("Cleanup with SequenceRetention: %+v, %v; want 7 sequences", res, err)
		}
	})
}

func TestCleanupMissingTable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib, err := inbox.New(b.db, inbox.Config{Table: uniqueName("never_migrated"), Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ib.Cleanup(context.Background()); !errors.Is(err, inbox.ErrNotMigrated) {
			t.Fatalf("Cleanup on a missing table: %v, want ErrNotMigrated", err)
		}
	})
}
