package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
)

// gauges is the collector of the cluster-wide gauges. They are computed
// in SQL from one store.Snapshot, so every relay would report the same
// numbers; to keep the database's work bounded, only the relay holding the
// store's gauge lease (store.Features.GaugeLeaser) refreshes and exports
// them, at most once per GaugeInterval. The others export outbox_gauges_leader 0 and
// none of the gauges, so that sum() over all relays stays right. A store
// without a lease (SQLite: one relay per database) refreshes in every
// process that runs RunGauges.
type gauges struct {
	cfg         Config
	storeErrors *prometheus.CounterVec

	events, oldestDue, blocked, deadLetters, leader *prometheus.Desc

	mu        sync.Mutex
	snap      *store.Snapshot // nil: nothing to export
	finals    map[outbox.Status]int64
	lastFinal time.Time
	lease     store.GaugeLease
}

func newGauges(cfg Config, storeErrors *prometheus.CounterVec) *gauges {
	return &gauges{
		cfg:         cfg,
		storeErrors: storeErrors,
		events: prometheus.NewDesc("outbox_events",
			"Events in the outbox table by status (cluster-wide, from one database snapshot).", []string{"status"}, nil),
		oldestDue: prometheus.NewDesc("outbox_oldest_due_pending_age_seconds",
			"Time since the oldest due PENDING event became due; events delayed on purpose or waiting out a backoff are not due (cluster-wide).", nil, nil),
		blocked: prometheus.NewDesc("outbox_blocked_aggregates",
			"Aggregates whose later events wait behind a FAILED event (cluster-wide).", nil, nil),
		deadLetters: prometheus.NewDesc("outbox_dead_letters",
			"Dead-letter rows not requeued (cluster-wide).", nil, nil),
		leader: prometheus.NewDesc("outbox_gauges_leader",
			"1 on the one relay that refreshes and exports the cluster-wide gauges, 0 on the others.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.events, g.oldestDue, g.blocked, g.deadLetters, g.leader} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	snap, finals := g.snap, g.finals
	g.mu.Unlock()
	leader := 0.0
	if snap != nil {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(g.leader, prometheus.GaugeValue, leader)
	if snap == nil {
		return
	}
	for _, st := range store.UnfinishedStatuses {
		ch <- prometheus.MustNewConstMetric(g.events, prometheus.GaugeValue, float64(snap.Counts[st]), string(st))
	}
	if finals != nil {
		for _, st := range store.FinalStatuses {
			ch <- prometheus.MustNewConstMetric(g.events, prometheus.GaugeValue, float64(finals[st]), string(st))
		}
	}
	ch <- prometheus.MustNewConstMetric(g.oldestDue, prometheus.GaugeValue, snap.OldestDuePendingAge.Seconds())
	ch <- prometheus.MustNewConstMetric(g.blocked, prometheus.GaugeValue, float64(snap.BlockedAggregateCount))
	ch <- prometheus.MustNewConstMetric(g.deadLetters, prometheus.GaugeValue, float64(snap.DeadLetters))
}

// RunGauges refreshes the cluster-wide gauges every GaugeInterval until
// ctx ends, then gives up the gauge lease. It returns at once when
// Config.Store is nil. Run it beside the relay: go m.RunGauges(ctx).
func (m *Metrics) RunGauges(ctx context.Context) {
	g := m.gauges
	if g.cfg.Store == nil {
		return
	}
	defer g.drop()
	t := time.NewTicker(g.cfg.GaugeInterval)
	defer t.Stop()
	for {
		g.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh takes the lease if it can (or keeps it) and reads a snapshot.
func (g *gauges) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(g.cfg.GaugeInterval, 5*time.Second))
	defer cancel()
	snapshot := g.cfg.Store.Snapshot
	if leaser := g.cfg.Store.Features().GaugeLeaser; leaser != nil {
		if g.lease == nil {
			lease, got, err := leaser.TryGaugeLease(ctx)
			if err != nil {
				g.failed(ctx, err)
				return
			}
			if !got {
				g.drop() // another relay refreshes the gauges
				return
			}
			g.lease = lease
			g.cfg.Logger.Info("metrics: this relay now refreshes the cluster-wide gauges")
		}
		snapshot = g.lease.Snapshot
	}
	req := store.SnapshotRequest{FailedBlocks: g.cfg.OnFailure == relay.BlockAggregate}
	now := time.Now()
	if g.cfg.FinalCountInterval >= 0 && (g.lastFinal.IsZero() || now.Sub(g.lastFinal) >= g.cfg.FinalCountInterval) {
		req.Full = true
	}
	snap, err := snapshot(ctx, req)
	if err != nil {
		g.failed(ctx, err)
		return
	}
	g.mu.Lock()
	g.snap = &snap
	if snap.Full {
		g.finals, g.lastFinal = snap.Counts, now
	}
	g.mu.Unlock()
}

// failed counts a failed refresh and stops exporting: stale figures would
// be mistaken for current ones. The lease is given up, since its session
// may be gone.
func (g *gauges) failed(ctx context.Context, err error) {
	if ctx.Err() == context.Canceled {
		return // stopping
	}
	g.storeErrors.WithLabelValues(OpSnapshot).Inc()
	g.cfg.Logger.Warn("metrics: refreshing the cluster-wide gauges failed", "err", err)
	g.drop()
}

// drop releases the lease, if held, and stops exporting the gauges.
func (g *gauges) drop() {
	if g.lease != nil {
		g.lease.Release()
		g.lease = nil
	}
	g.mu.Lock()
	g.snap, g.finals, g.lastFinal = nil, nil, time.Time{}
	g.mu.Unlock()
}
