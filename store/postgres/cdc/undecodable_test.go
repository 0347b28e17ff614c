package cdc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/relay/relaytest"
	"github.com/txoutbox/outbox/store/postgres/cdc"
)

// A slot whose WAL PostgreSQL cannot decode fails the same way at every
// restart from its position, holding WAL for ever. Here the publication is
// dropped while no relay runs and created again at start, so decoding the
// events committed between fails ("publication ... does not exist"): the
// source recreates the slot at the current position, the safety-net poll
// delivers those events, and the stream works again.
func TestSlotTheServerCannotDecodeIsRecreated(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	rec := &relaytest.Recorder{}
	src := h.source(t, cdcConfig())
	_, stop := runRelay(t, src, rec, relay.Config{})
	eventually(t, 30*time.Second, "the relay to stream", src.Streaming)
	h.enqueue(t, "before", 1)
	eventually(t, 30*time.Second, "the first event delivered", func() bool { return len(rec.Deliveries()) == 1 })
	stop()

	if _, err := h.pool.Exec(ctx, fmt.Sprintf(`DROP PUBLICATION %q`, h.pub)); err != nil {
		t.Fatal(err)
	}
	h.enqueue(t, "gap", 3)
	gapLSN := h.currentLSN(t)

	src2 := h.source(t, cdc.Config{PollInterval: 200 * time.Millisecond}) // creates the publication again
	_, stop2 := runRelay(t, src2, rec, relay.Config{})
	defer stop2()
	eventually(t, time.Minute, "the slot recreated", func() bool { return src2.SlotRecreations() == 1 },
		func() string { return h.progress(t, src2, len(rec.Deliveries())) })
	h.waitSlotPast(t, time.Minute, gapLSN)
	eventually(t, 30*time.Second, "the events of the gap delivered", func() bool { return len(rec.Deliveries()) == 4 },
		func() string { return h.progress(t, src2, len(rec.Deliveries())) })

	streamed := src2.Streamed()
	h.enqueue(t, "after", 1)
	eventually(t, 30*time.Second, "the stream to bring an event again", func() bool { return src2.Streamed() == streamed+1 && len(rec.Deliveries()) == 5 },
		func() string { return h.progress(t, src2, len(rec.Deliveries())) })
	if err := relaytest.CheckOrder(rec.Deliveries()); err != nil {
		t.Error(err)
	}
	if n := src2.SlotRecreations(); n != 1 {
		t.Errorf("slot recreated %d times, want 1", n)
	}
}
