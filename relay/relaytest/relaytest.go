// Package relaytest is the relay-over-store suite every store backend
// runs next to the Store conformance suite (store/storetest), on the same
// harness: relaytest.Run(t, newHarness). It drives the real relay over the
// backend's store with recording sinks (Recorder) and checks the
// guarantees end to end: atomic enqueue, no loss, per-aggregate order,
// bounded duplicates, fencing and expiry, under failing sinks, failing
// outcome writes and concurrent relays.
package relaytest

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store/storetest"
)

// Run runs the whole suite: the groups Relay, Outcome, Producers,
// Deadlines, Breaker and Encryption.
func Run(t *testing.T, newHarness storetest.Factory) {
	t.Run("Relay", func(t *testing.T) { RunRelay(t, newHarness) })
	t.Run("Outcome", func(t *testing.T) { RunOutcome(t, newHarness) })
	t.Run("Producers", func(t *testing.T) { RunProducers(t, newHarness) })
	t.Run("Deadlines", func(t *testing.T) { RunDeadlines(t, newHarness) })
	t.Run("Breaker", func(t *testing.T) { RunBreaker(t, newHarness) })
	t.Run("Encryption", func(t *testing.T) { RunEncryption(t, newHarness) })
}

// RunRelay checks the guarantees end to end through the real relay.
func RunRelay(t *testing.T, newHarness storetest.Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *storetest.Harness)
	}{
		{"RollbackNeverDeliversCommitAlways", testRollbackNeverDelivers},
		{"ConcurrentRelaysExactlyOnce", testConcurrentRelays},
		{"RetriesThenDelivered", testRetriesThenDelivered},
		{"MaxRetriesFailsWithDeadLetterAndAlarm", testMaxRetries},
		{"PermanentErrorFailsAtOnce", testPermanent},
		{"ExpiredNeverSent", testExpiredNeverSent},
		{"RelayNeverSendsExpiredEvenToACarelessSink", testRelayChecksDeadline},
		{"OrderUnderRandomFailuresTwoRelays", testOrderUnderFailures},
		{"PipelinedDrainWithSlowFlakySink", testPipelinedDrain},
		{"PausedRelayIsFenced", testPausedRelayFenced},
		{"CleanStopLeavesNothingProcessing", testCleanStop},
		{"DrainStopsAtBlockedAggregates", testDrainBlocked},
		{"ReceiptsInTheAuditTrail", testReceiptsInAuditTrail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

// testConfig is a relay configuration with short timings for tests. The
// circuit breaker is off: these tests check the retry policy, order and
// fencing with sinks that fail some events on purpose, which would open
// it (its own tests are in the relay package, storetest.RunRoutes and
// RunBreaker).
func testConfig(h *storetest.Harness, s sink.Sink, id string) relay.Config {
	return relay.Config{
		Breaker:       relay.BreakerConfig{Disabled: true},
		Store:         h.Store,
		Sink:          s,
		RelayID:       id,
		BatchSize:     100,
		PollInterval:  20 * time.Millisecond,
		SweepInterval: 250 * time.Millisecond,
		Lease:         30 * time.Second,
		BackoffMin:    5 * time.Millisecond,
		BackoffMax:    20 * time.Millisecond,
		StopTimeout:   5 * time.Second,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func newRelay(t testing.TB, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	return r
}

func drain(t testing.TB, r *relay.Relay, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("drain: %v (stats %+v)", err, r.Stats())
	}
}

// runRelays runs relays until stop is called; stop waits for them.
func runRelays(t testing.TB, rs ...*relay.Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil {
				t.Errorf("relay %s: %v", r.ID(), err)
			}
		}()
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}
