package cdc_test

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store/postgres/cdc"
)

// A PostgreSQL restart during the stream (a private cluster of this test):
// the relay reconnects, resumes from the slot's confirmed position and
// delivers what was committed before and after the restart.
//
// The safety-net poll runs, as it does by default: around a restart some
// events are the table's, not the stream's, to hand out. A batch whose
// outcome could not be recorded before its lease ended goes back to
// PENDING by the reaper; a claim by id that timed out after it committed
// holds its events until the reaper frees them. When the stream had
// settled those ids already, only the poll brings them (with the poll off, 1
// run in 8 beside other work left 190 events PENDING for a minute).
func TestPostgresRestartStreamResumes(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartPostgresCluster(t)
	h := newHarnessOn(t, cluster.DSN())
	cfg := cdcConfig()
	cfg.PollInterval = 2 * time.Second
	src := h.source(t, cfg)
	rec := &relaytest.Recorder{}
	_, stop := runRelay(t, src, rec, relay.Config{BatchSize: 20})
	eventually(t, 30*time.Second, "the relay to stream", src.Streaming)
	for i := 0; i < 20; i++ {
		h.enqueue(t, "before", 5)
	}
	eventually(t, 30*time.Second, "the first events delivered", func() bool { return len(rec.Deliveries()) > 0 })

	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the stream to notice", func() bool { return !src.Streaming() })
	if err := cluster.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the relay to stream again", src.Streaming)
	for i := 0; i < 20; i++ {
		h.enqueue(t, "after", 5)
	}
	lastLSN := h.currentLSN(t)
	eventually(t, 60*time.Second, "every event PROCESSED", func() bool { return h.count(t, outbox.StatusProcessed) == 200 },
		func() string { return h.progress(t, src, len(rec.Deliveries())) })
	// The resumed stream read the transactions committed after the
	// restart and settled them: the slot's confirmed position passes the
	// last one. How many events came by the poll depends on the two cases
	// above (all of an aggregate's events behind a reaped head), so it is
	// logged, not bounded.
	h.waitSlotPast(t, 2*time.Minute, lastLSN)
	stop()
	if err := relaytest.CheckOrder(rec.Deliveries()); err != nil {
		t.Error(err)
	}
	t.Logf("claimed by the stream %d, by the safety-net poll %d", src.ClaimedByStream(), src.ClaimedByPoll())
}

// The slot disappears under a streaming relay (as after a primary failover
// to a server without it, or a restore): the relay recreates it and goes
// on; what was committed while no slot followed the table comes by the
// safety-net poll.
func TestDroppedSlotIsRecreated(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	src := h.source(t, cdc.Config{PollInterval: 300 * time.Millisecond})
	rec := &relaytest.Recorder{}
	_, stop := runRelay(t, src, rec, relay.Config{})
	eventually(t, 30*time.Second, "the relay to stream", src.Streaming)
	ctx := context.Background()
	// End the walsender and drop the slot before the relay reconnects
	// (its first retry waits 200ms).
	if _, err := h.pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1`, h.slot); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the slot to be released", func() bool {
		_, err := h.pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, h.slot)
		return err == nil
	})
	h.enqueue(t, "gap", 3) // committed while no slot exists
	eventually(t, 30*time.Second, "the slot recreated and streamed from", func() bool {
		var active bool
		err := h.pool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, h.slot).Scan(&active)
		return err == nil && active && src.Streaming()
	})
	h.enqueue(t, "after", 3)
	eventually(t, 30*time.Second, "every event PROCESSED", func() bool { return h.count(t, outbox.StatusProcessed) == 6 })
	stop()
	if err := relaytest.CheckOrder(rec.Deliveries()); err != nil {
		t.Error(err)
	}
}
