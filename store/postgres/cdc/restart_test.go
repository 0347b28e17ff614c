package cdc_test

import (
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store/storetest"
)

// A PostgreSQL restart during the stream (a private cluster of this test):
// the relay reconnects, resumes from the slot's confirmed position and
// delivers what was committed before and after the restart.
func TestPostgresRestartStreamResumes(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartPostgresCluster(t)
	h := newHarnessOn(t, cluster.DSN())
	src := h.source(t, cdcConfig())
	rec := &storetest.Recorder{}
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
	for i := 0; i < 20; i++ {
		h.enqueue(t, "after", 5)
	}
	eventually(t, 60*time.Second, "every event PROCESSED", func() bool { return h.count(t, outbox.StatusProcessed) == 200 },
		func() string { return "" })
	eventually(t, 30*time.Second, "the relay to stream again", src.Streaming)
	stop()
	if err := storetest.CheckOrder(rec.Deliveries()); err != nil {
		t.Error(err)
	}
	if src.ClaimedByPoll() != 0 {
		t.Errorf("%d events came by the safety-net poll; the resumed stream should have brought them", src.ClaimedByPoll())
	}
}
