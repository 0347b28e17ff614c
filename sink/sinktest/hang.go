package sinktest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

// PublishToHang publishes msgs to a destination that hangs (see
// StallProxy) and checks that the sink gives up by its own timeout, with
// results the relay's circuit breaker counts as destination faults: the
// first message of each ordering key fails with an error that is neither
// permanent nor "not attempted", while the relay's context is still
// alive. within bounds the call (a sink that waits for ever fails the
// test). It returns the results and how many of them the sink reported
// before Publish returned (sink.ReportResult).
func PublishToHang(t *testing.T, s sink.Sink, msgs []outbox.Message, within time.Duration) (res []error, reported int) {
	t.Helper()
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	ctx = sink.WithResultFunc(ctx, func(*outbox.Message, error) {
		mu.Lock()
		reported++
		mu.Unlock()
	})
	started := time.Now()
	res = s.Publish(ctx, msgs)
	took := time.Since(started)
	if ctx.Err() != nil {
		t.Fatalf("Publish to a destination that hangs returned only when the caller's context ended (%s): the sink has no timeout of its own", took)
	}
	if len(res) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(res), len(msgs))
	}
	first := map[string]bool{}
	for i, err := range res {
		key := msgs[i].OrderingKey()
		if first[key] {
			continue
		}
		first[key] = true
		switch {
		case err == nil:
			t.Errorf("message %d was acknowledged by a destination that hangs", i)
		case outbox.IsPermanent(err):
			t.Errorf("message %d: a hang is reported as an event fault (permanent): %v", i, err)
		case errors.Is(err, outbox.ErrNotAttempted):
			t.Errorf("message %d: a hang is reported as not attempted (the breaker would not count it): %v", i, err)
		}
	}
	t.Logf("Publish gave up after %s: %v", took.Round(time.Millisecond), res[0])
	mu.Lock()
	defer mu.Unlock()
	return res, reported
}
