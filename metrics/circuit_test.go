package metrics_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/metrics"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/relay/relaytest"
)

// TestCircuitStateFollowsTheBreaker: outbox_circuit_state{route} is 2
// while the route's destination is down and its breaker open, and back
// to 0 once a probe got through, on each database.
func TestCircuitStateFollowsTheBreaker(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := openBackend(t, kind)
			reg := prometheus.NewRegistry()
			m, err := metrics.New(metrics.Config{Registerer: reg, RelayID: "relay-c"})
			if err != nil {
				t.Fatal(err)
			}
			var down atomic.Bool
			down.Store(true)
			rec := &relaytest.Recorder{Fail: func(outbox.Message) error {
				if down.Load() {
					return errors.New("gateway said 503")
				}
				return nil
			}}
			var events []outbox.Event
			for i := range 20 {
				events = append(events, event("c", i))
			}
			b.enqueue(t, events...)
			r, err := relay.New(relay.Config{Store: b.store, Sink: rec, Observer: m, Logger: slog.New(slog.DiscardHandler),
				PollInterval: 20 * time.Millisecond, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
				Breaker: relay.BreakerConfig{OpenMin: 200 * time.Millisecond, OpenMax: 400 * time.Millisecond, Refresh: 20 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			state := func() float64 {
				v, _ := sample(t, reg, "outbox_circuit_state", "route", "default")
				return v
			}
			// Two minutes bound a hang, with room for a slow database on a
			// busy machine. The waits end as soon as the state shows.
			waitFor(t, 2*time.Minute, "outbox_circuit_state 2 (open)", func() bool { return state() == 2 })
			down.Store(false)
			waitFor(t, 2*time.Minute, "outbox_circuit_state 0 (closed)", func() bool { return state() == 0 })
			if got := metrics.CircuitStateValue("HALF_OPEN"); got != 1 {
				t.Errorf("half-open is %v, want 1", got)
			}
		})
	}
}
