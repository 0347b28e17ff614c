package sqlite_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/sqlite"
)

// BenchmarkDrain measures claim + complete of a backlog in batches of 500,
// per event.
func BenchmarkDrain(b *testing.B) {
	e := newEnv(b, sqlite.Config{})
	ctx := context.Background()
	const batch = 500
	events := make([]outbox.Event, 0, 1000)
	for n := 0; n < b.N; {
		events = events[:0]
		for i := 0; i < 1000 && n < b.N; i++ {
			events = append(events, ev(fmt.Sprintf("agg-%d", n%100), n))
			n++
		}
		e.enqueue(b, events...)
	}
	b.ResetTimer()
	done := 0
	for done < b.N {
		c, err := e.store.Claim(ctx, store.ClaimRequest{RelayID: "bench", Limit: batch, Lease: time.Minute, FailedBlocks: true})
		if err != nil {
			b.Fatal(err)
		}
		if len(c.Events) == 0 {
			b.Fatalf("claimed nothing with %d of %d done", done, b.N)
		}
		res, err := e.store.Complete(ctx, store.CompleteRequest{Token: c.Token, RelayID: "bench", FailedBlocks: true,
			Outcomes: outcomes(c, store.Delivered)})
		if err != nil || len(res.Applied) != len(c.Events) {
			b.Fatalf("complete: %+v, %v", res, err)
		}
		done += len(c.Events)
	}
}

// BenchmarkEnqueue measures one producer transaction with one event.
func BenchmarkEnqueue(b *testing.B) {
	e := newEnv(b, sqlite.Config{})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.enqueue(b, ev(fmt.Sprintf("agg-%d", i%100), i))
	}
}
