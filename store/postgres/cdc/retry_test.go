package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store/postgres/cdc"
)

// A sink that fails for one aggregate: the retry path owns its events
// (backoff, then delivery in order by the safety-net poll), a permanently
// failing aggregate ends FAILED with a dead letter and its later events
// BLOCKED, and the stream goes on for the other aggregates. The slot moves
// past every transaction once its events are final or back in the table.
func TestFailingSinkHandsAggregateToRetryPath(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	src := h.source(t, cdc.Config{PollInterval: 200 * time.Millisecond})
	var mu sync.Mutex
	flakyFails := 0
	rec := &relaytest.Recorder{Fail: func(m outbox.Message) error {
		switch m.AggregateID {
		case "dead":
			return outbox.Permanent(errors.New("rejected by the destination"))
		case "flaky":
			mu.Lock()
			defer mu.Unlock()
			if flakyFails < 3 { // the aggregate's first event, three times
				flakyFails++
				return errors.New("destination unavailable")
			}
		}
		return nil
	}}
	_, stop := runRelay(t, src, rec, relay.Config{BatchSize: 20, MaxRetries: 5})
	eventually(t, 30*time.Second, "the relay to stream", src.Streaming)

	h.enqueue(t, "flaky", 3)
	h.enqueue(t, "dead", 3)
	for i := 0; i < 20; i++ {
		h.enqueue(t, fmt.Sprintf("good-%d", i%4), 5)
	}
	h.enqueue(t, "flaky", 2) // committed while the first flaky event waits in backoff
	lastLSN := h.currentLSN(t)
	eventually(t, 30*time.Second, "the good aggregates delivered", func() bool {
		n := 0
		for _, d := range rec.Deliveries() {
			if strings.Contains(d.Key, "good-") {
				n++
			}
		}
		return n == 100
	})
	eventually(t, 30*time.Second, "flaky delivered after its retries, dead FAILED", func() bool {
		return h.count(t, outbox.StatusProcessed) == 105 && h.count(t, outbox.StatusFailed) == 1 && h.count(t, outbox.StatusBlocked) == 2
	}, func() string {
		return fmt.Sprintf("processed %d, failed %d, blocked %d, pending %d, processing %d", h.count(t, outbox.StatusProcessed),
			h.count(t, outbox.StatusFailed), h.count(t, outbox.StatusBlocked), h.count(t, outbox.StatusPending), h.count(t, outbox.StatusProcessing))
	})
	// Every transaction is settled: the slot may move past all of them.
	h.waitSlotPast(t, 2*time.Minute, lastLSN) // the bound catches a position that never moves
	stop()

	if err := relaytest.CheckOrder(rec.Deliveries()); err != nil {
		t.Error(err)
	}
	if src.ClaimedByPoll() == 0 {
		t.Error("the safety-net poll claimed nothing: who retried the flaky aggregate?")
	}
	var retries, deadLetters int
	ctx := context.Background()
	if err := h.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q WHERE outcome = 'RETRY'`, h.table+"_attempts")).Scan(&retries); err != nil {
		t.Fatal(err)
	}
	if err := h.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q`, h.table+"_dead_letters")).Scan(&deadLetters); err != nil {
		t.Fatal(err)
	}
	if retries != 3 || deadLetters != 1 {
		t.Errorf("%d RETRY audit rows and %d dead letters, want 3 and 1", retries, deadLetters)
	}
}

// An event whose deadline passed before the stream brought it ends EXPIRED
// without being sent (completed as EXPIRED by the claim, or expired by the
// sweeper, whichever comes first); the next event of its aggregate goes on.
func TestStreamedEventPastDeadlineEndsExpired(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// When the sweeper holds the first event's row (expiring it) as the
	// claim by id runs, the claim skips that row and stops its aggregate
	// there, leaving the second event to the safety-net poll.
	src := h.source(t, cdc.Config{PollInterval: 300 * time.Millisecond})
	rec := &relaytest.Recorder{}
	_, stop := runRelay(t, src, rec, relay.Config{})
	eventually(t, 30*time.Second, "the relay to stream", src.Streaming)
	ctx := context.Background()
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Enqueue(ctx, tx, outbox.Event{AggregateType: "payment", AggregateID: "p-1", EventType: "Authorized",
		Payload: []byte(`{}`), TTL: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// The deadline (10ms after the transaction's start) passes before it commits.
	if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.1)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "p-1", 1)
	eventually(t, 30*time.Second, "one EXPIRED and one PROCESSED", func() bool {
		return h.count(t, outbox.StatusExpired) == 1 && h.count(t, outbox.StatusProcessed) == 1
	})
	stop()
	if ds := rec.Deliveries(); len(ds) != 1 {
		t.Errorf("%d deliveries, want only the event without a deadline", len(ds))
	}
}
