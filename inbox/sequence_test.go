package inbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/txoutbox/outbox/inbox"
)

// issues collects what OnSequence reports.
type issues struct {
	mu  sync.Mutex
	got []inbox.SequenceIssue
}

func (i *issues) add(_ context.Context, s inbox.SequenceIssue) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.got = append(i.got, s)
}

// take returns and forgets what was reported, as "kind seq/last".
func (i *issues) take() []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	out := make([]string, len(i.got))
	for j, s := range i.got {
		out[j] = fmt.Sprintf("%s %d/%d", s.Kind, s.Seq, s.Last)
	}
	i.got = nil
	return out
}

// A test delivers one aggregate's events with one dropped and two swapped:
// the gap and the reordering are reported, duplicates are not, and a
// report counts in Stats.
func TestSequenceGapsAndReordering(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		var seen issues
		ib := newInbox(t, b, inbox.Config{OnSequence: seen.add})
		e := newEffects(t, b)
		msg := func(agg string, seq int64) inbox.Message {
			return inbox.Message{EventID: fmt.Sprintf("%s-evt-%d", agg, seq), AggregateType: "payment", AggregateID: agg, Seq: seq}
		}
		deliver := func(agg string, seqs ...int64) {
			t.Helper()
			for _, s := range seqs {
				handle(t, ib, e, "billing", msg(agg, s))
			}
		}
		expect := func(what string, want ...string) {
			t.Helper()
			if got := seen.take(); !slices.Equal(got, want) {
				t.Fatalf("%s: reported %q, want %q", what, got, want)
			}
		}

		deliver("tx-1", 1, 2, 3)
		expect("in order")

		deliver("tx-1", 5) // 4 dropped
		expect("4 dropped", "gap 5/3")

		deliver("tx-1", 4) // the dropped one arrives late
		expect("4 late", "reorder 4/5")

		deliver("tx-1", 7, 6) // 6 and 7 swapped
		expect("6 and 7 swapped", "gap 7/5", "reorder 6/7")

		deliver("tx-1", 7, 6, 5) // repeats of recorded ids
		expect("duplicates")

		deliver("tx-1", 8)
		expect("back in order")

		// Aggregates are independent; one seen first at 3 is a gap from 0.
		deliver("tx-2", 1, 2)
		deliver("tx-3", 3)
		expect("other aggregates", "gap 3/0")

		// The same aggregate id under another consumer starts afresh.
		if handle(t, ib, e, "ledger", msg("tx-1", 1)) != inbox.Processed {
			t.Fatal("ledger: not processed")
		}
		expect("another consumer")

		st := ib.Stats()
		if st.Gaps != 3 || st.Reorders != 2 {
			t.Fatalf("stats %+v, want 3 gaps, 2 reorders", st)
		}
		// Every message was handled all the same: the inbox reports, it
		// does not hold messages back.
		if n, want := e.count(t, ""), 3+1+1+2+1+2+1+1; n != want {
			t.Fatalf("%d effects, want %d", n, want)
		}
	})
}

// The last sequence moves with the consumer's transaction: a rolled-back
// message leaves no trace, so its redelivery is not a reordering.
func TestSequenceRollsBack(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		var seen issues
		ib := newInbox(t, b, inbox.Config{OnSequence: seen.add})
		e := newEffects(t, b)
		ctx := context.Background()
		m := func(seq int64) inbox.Message {
			return inbox.Message{EventID: fmt.Sprintf("evt-%d", seq), AggregateType: "payment", AggregateID: "tx-9", Seq: seq}
		}
		handle(t, ib, e, "billing", m(1))
		tx, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ib.HandleMessage(ctx, tx, "billing", m(2), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		handle(t, ib, e, "billing", m(2))
		handle(t, ib, e, "billing", m(3))
		if got := seen.take(); len(got) != 0 {
			t.Fatalf("reported %q after a rolled-back message was redelivered, want nothing", got)
		}
	})
}
