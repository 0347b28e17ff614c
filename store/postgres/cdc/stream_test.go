package cdc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/relay/relaytest"
)

// A backlog committed in many transactions while the relay streams: every
// event is delivered once, in order per aggregate, each by a claim of the
// streamed ids (the safety-net poll is an hour away), with an audit row
// each, and a walsender serves the slot.
func TestStreamDeliversConcurrentBacklogInOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	src := h.source(t, cdcConfig())
	rec := &relaytest.Recorder{}
	_, stop := runRelay(t, src, rec, relay.Config{BatchSize: 50})
	eventually(t, 30*time.Second, "the relay to stream", src.Streaming)

	const producers, txns, perTxn, aggs = 4, 25, 4, 10
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < txns; i++ {
				h.enqueue(t, fmt.Sprintf("agg-%d", (p*txns+i)%aggs), perTxn)
			}
		}()
	}
	wg.Wait()
	total := producers * txns * perTxn
	// Every walsender on the server decodes all of its WAL: with another
	// copy of the suite writing to the same server, 400 events took more
	// than a minute to arrive.
	eventually(t, 2*time.Minute, "every event PROCESSED", func() bool { return h.count(t, outbox.StatusProcessed) == total },
		func() string { return h.progress(t, src, len(rec.Deliveries())) })

	var walsenders int
	if err := h.pool.QueryRow(context.Background(), `
SELECT count(*) FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.slot_name = $1`, h.slot).Scan(&walsenders); err != nil {
		t.Fatal(err)
	}
	if walsenders != 1 {
		t.Errorf("%d walsenders serve slot %s, want 1", walsenders, h.slot)
	}
	stop()

	ds := rec.Deliveries()
	if len(ds) != total {
		t.Errorf("%d deliveries, want %d (one per event)", len(ds), total)
	}
	if err := relaytest.CheckOrder(ds); err != nil {
		t.Error(err)
	}
	if got := src.ClaimedByStream(); got != int64(total) {
		t.Errorf("%d events claimed from the stream, want all %d (by poll: %d)", got, total, src.ClaimedByPoll())
	}
	if src.ClaimedByPoll() != 0 {
		t.Errorf("%d events claimed by the poll; the stream should have had them all", src.ClaimedByPoll())
	}
	var audited int
	// A delivery is audited in the deliveries table (migration 10), or,
	// from before it, on the event row (migration 7) or as an attempt row.
	if err := h.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT (SELECT count(*) FROM %q WHERE outcome = 'DELIVERED')
    + (SELECT count(*) FROM %q WHERE delivered_relay_id IS NOT NULL)
    + (SELECT COALESCE(sum(delivered), 0) FROM %q)`, h.table+"_attempts", h.table, h.table+"_deliveries")).Scan(&audited); err != nil {
		t.Fatal(err)
	}
	if audited != total {
		t.Errorf("%d DELIVERED audit rows, want %d", audited, total)
	}
}
