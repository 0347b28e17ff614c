package mysql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/mysql"
	"github.com/txoutbox/outbox/store/storetest"
)

// BenchmarkDrain measures claim + complete of a backlog in batches of 500,
// per event, as SQLite's BenchmarkDrain does: every event is claimed and
// delivered (attempted, with its times), on a table of its own per run.
func BenchmarkDrain(b *testing.B) {
	db := openDB(b)
	s := newStore(b, db, mysql.Config{Table: storetest.TableName("mybench")})
	ctx := context.Background()
	const batch = 500
	events := make([]outbox.Event, 0, 1000)
	for n := 0; n < b.N; {
		events = events[:0]
		for i := 0; i < 1000 && n < b.N; i++ {
			events = append(events, storetest.PaymentEvent(fmt.Sprintf("agg-%d", n%100), n))
			n++
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Enqueue(ctx, tx, events...); err != nil {
			_ = tx.Rollback()
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	done := 0
	for done < b.N {
		c, err := s.Claim(ctx, store.ClaimRequest{RelayID: "bench", Limit: batch, Lease: time.Minute, FailedBlocks: true})
		if err != nil {
			b.Fatal(err)
		}
		if len(c.Events) == 0 {
			b.Fatalf("claimed nothing with %d of %d done", done, b.N)
		}
		outs := make([]store.Outcome, len(c.Events))
		for i, e := range c.Events {
			outs[i] = store.Outcome{ID: e.ID, EventID: e.EventID, Kind: store.Delivered, Attempt: e.Attempt, Attempted: true,
				StartedAt: c.DBTime, FinishedAt: c.DBTime.Add(time.Millisecond)}
		}
		res, err := s.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "bench", FailedBlocks: true, Outcomes: outs})
		if err != nil || len(res.Applied) != len(c.Events) {
			b.Fatalf("complete: %+v, %v", res, err)
		}
		done += len(c.Events)
	}
}
