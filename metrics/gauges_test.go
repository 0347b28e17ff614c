package metrics_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txoutbox/outbox/metrics"
	"github.com/txoutbox/outbox/store"
)

// runGauges runs m.RunGauges until the returned stop is called.
func runGauges(m *metrics.Metrics) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.RunGauges(ctx) }()
	return func() { cancel(); <-done }
}

// TestOneRelayExportsTheGauges: of two relays on one outbox, one holds the
// gauge lease and exports the gauges; when it stops, the other takes over.
func TestOneRelayExportsTheGauges(t *testing.T) {
	for _, kind := range []string{"postgres", "mariadb"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := openBackend(t, kind)
			b.enqueue(t, event("a", 0), event("b", 0))
			if b.store.Features().GaugeLeaser == nil {
				t.Fatalf("%T has no gauge lease", b.store)
			}
			newMetrics := func(st store.Store) (*metrics.Metrics, *prometheus.Registry) {
				reg := prometheus.NewRegistry()
				m, err := metrics.New(metrics.Config{Registerer: reg, Store: st, GaugeInterval: 20 * time.Millisecond,
					Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				return m, reg
			}
			m1, reg1 := newMetrics(b.store)
			m2, reg2 := newMetrics(b.another(t))
			stop1 := runGauges(m1)
			waitFor(t, 10*time.Second, "the first relay to lead", func() bool {
				return mustSample(t, reg1, "outbox_gauges_leader") == 1
			})
			stop2 := runGauges(m2)
			defer stop2()
			// While the leader sees new events (so refresh intervals pass,
			// and the second relay tries for the lease each time), the
			// second must stay a follower.
			for n := 2; n <= 4; n++ {
				if n > 2 {
					b.enqueue(t, event("c", n))
				}
				waitFor(t, 10*time.Second, "the leader to refresh", func() bool {
					return mustSample(t, reg1, "outbox_events", "status", "PENDING") == float64(n)
				})
				if v := mustSample(t, reg2, "outbox_gauges_leader"); v != 0 {
					t.Fatalf("both relays lead")
				}
				if _, ok := sample(t, reg2, "outbox_events", "status", "PENDING"); ok {
					t.Fatalf("the follower exports the gauges")
				}
			}
			stop1()
			if _, ok := sample(t, reg1, "outbox_events", "status", "PENDING"); ok {
				t.Errorf("a stopped relay still exports the gauges")
			}
			waitFor(t, 10*time.Second, "the second relay to take over", func() bool {
				v, ok := sample(t, reg2, "outbox_events", "status", "PENDING")
				return ok && v == 4 && mustSample(t, reg2, "outbox_gauges_leader") == 1
			})
		})
	}
}

// brokenSnapshots fails every snapshot, as a database that went away would.
type brokenSnapshots struct{ store.Store }

func (brokenSnapshots) Snapshot(context.Context, store.SnapshotRequest) (store.Snapshot, error) {
	return store.Snapshot{}, errBroken
}

var errBroken = errors.New("connection reset by peer")

func TestFailedRefreshRemovesTheGauges(t *testing.T) {
	t.Parallel()
	b := openBackend(t, "sqlite")
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Config{Registerer: reg, Store: brokenSnapshots{b.store}, GaugeInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	stop := runGauges(m)
	defer stop()
	waitFor(t, 10*time.Second, "snapshot errors to be counted", func() bool {
		return mustSample(t, reg, "outbox_store_errors_total", "op", "snapshot") >= 2
	})
	if _, ok := sample(t, reg, "outbox_events", "status", "PENDING"); ok {
		t.Errorf("gauges exported although every refresh failed")
	}
}
