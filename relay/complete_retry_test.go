package relay

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// flakyCompleter is a Store whose Complete fails its first failures calls
// and then succeeds; each call moves the relay's clock on by step, so the
// lease runs out after a known number of calls, without waiting for it.
type flakyCompleter struct {
	featuresOnly
	failures int
	step     time.Duration

	mu    sync.Mutex
	calls int
	clock time.Time
}

func (f *flakyCompleter) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clock
}

func (f *flakyCompleter) Complete(_ context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.clock = f.clock.Add(f.step)
	if f.calls <= f.failures {
		return store.CompleteResult{}, errors.New("connection refused")
	}
	applied := map[int64]bool{}
	for _, o := range req.Outcomes {
		applied[o.ID] = true
	}
	return completeResult(req.Outcomes, applied), nil
}

// GetEvent fails as Complete does: the database is unreachable, so the
// relay does not take the failures for a refusal of this batch's outcome.
func (f *flakyCompleter) GetEvent(context.Context, outbox.EventID) (store.Record, error) {
	return store.Record{}, errors.New("connection refused")
}

func completeOnce(t *testing.T, f *flakyCompleter, lease time.Duration) (*Relay, string) {
	t.Helper()
	var logs bytes.Buffer
	r, err := New(Config{Store: f, Sink: nopSink{}, Lease: lease, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f.clock = time.Now()
	r.now = f.now
	b := &batch{relay: r, localClaim: f.now(), localClaimed: f.now(), claim: &store.Claim{Token: "token", DBTime: f.now(),
		Events: []store.Claimed{{Message: outbox.Message{ID: 7, AggregateType: "payment", AggregateID: "p-1"}}}}}
	r.complete(context.Background(), b, []store.Outcome{{ID: 7, Kind: store.Delivered, Attempted: true, Attempt: 1}})
	return r, logs.String()
}

// A failed outcome write is retried, with a growing delay, until it lands.
func TestCompleteRetriedUntilItLands(t *testing.T) {
	f := &flakyCompleter{failures: 2, step: time.Second}
	r, logs := completeOnce(t, f, time.Minute)
	if f.calls != 3 {
		t.Fatalf("Complete was called %d times, want 3 (two failures, then success)", f.calls)
	}
	if st := r.Stats(); st.CompleteErrors != 2 || st.Delivered != 1 {
		t.Fatalf("stats %+v, want 2 complete errors and 1 delivered", st)
	}
	if !strings.Contains(logs, "retry_in=50ms") || !strings.Contains(logs, "retry_in=100ms") {
		t.Fatalf("the retries should wait 50ms, then 100ms:\n%s", logs)
	}
}

// Once the next try would start after the lease ended, the relay stops
// trying: the rows belong to the reaper and are delivered again.
func TestCompleteGivesUpAtTheLeaseEnd(t *testing.T) {
	f := &flakyCompleter{failures: 1000, step: time.Second}
	r, logs := completeOnce(t, f, 3*time.Second)
	// Calls at 1s and 2s leave time for another try before the 3s lease ends; the call at 3s does not.
	if f.calls != 3 {
		t.Fatalf("Complete was called %d times in a 3s lease, one call per second; want 3", f.calls)
	}
	if st := r.Stats(); st.CompleteErrors != 3 || st.Delivered != 0 {
		t.Fatalf("stats %+v, want 3 complete errors and nothing delivered", st)
	}
	if !strings.Contains(logs, "before its lease ended") {
		t.Fatalf("giving up is not logged:\n%s", logs)
	}
}
