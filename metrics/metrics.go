package metrics

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
)

// Config configures Metrics. Registerer is required; the zero value of
// every other field means its default.
type Config struct {
	// Registerer receives the collectors, e.g. prometheus.NewRegistry()
	// or prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
	// RelayID and Version label outbox_relay_info. Use the relay's id
	// (relay.NewRelayID() gives one before the relay exists).
	RelayID, Version string

	// Store feeds the cluster-wide gauges (see RunGauges) and the relay's
	// lanes gauge. nil: no gauges.
	Store store.Store
	// OnFailure is the relays' failure policy: with BlockAggregate (the
	// default) aggregates behind a FAILED event count as blocked.
	OnFailure relay.FailurePolicy
	// GaugeInterval is how often the gauges are refreshed. Default 15s.
	GaugeInterval time.Duration
	// FinalCountInterval is how often the PROCESSED, EXPIRED and SKIPPED
	// counts are refreshed too: they read the whole table. Default 20
	// gauge intervals (5m with the default GaugeInterval); negative: never
	// (those series are then left out).
	FinalCountInterval time.Duration
	// MaxRoutes bounds the route label: past this many routes, the others
	// are counted as route "other" (a routing template with
	// {aggregate_id} would otherwise make one series per aggregate).
	// Default 100.
	MaxRoutes int
	// Logger receives warnings (gauge refresh failures). Default slog.Default().
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultGaugeInterval = 15 * time.Second
	DefaultMaxRoutes     = 100
	// OtherRoute is the route label of routes past Config.MaxRoutes.
	OtherRoute = "other"
	// SweeperRoute is the route label of events the sweeper expired while
	// they waited: no sink was asked, so they have no route of their own.
	SweeperRoute = "sweeper"
	// OpSnapshot is the store_errors op of a failed gauge refresh.
	OpSnapshot = "snapshot"
)

func (c Config) withDefaults() Config {
	if c.GaugeInterval == 0 {
		c.GaugeInterval = DefaultGaugeInterval
	}
	if c.FinalCountInterval == 0 {
		c.FinalCountInterval = 20 * c.GaugeInterval
	}
	if c.MaxRoutes == 0 {
		c.MaxRoutes = DefaultMaxRoutes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Version == "" {
		c.Version = "unknown"
	}
	return c
}

func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: metrics: "+format, append([]any{outbox.ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Registerer == nil:
		return bad("Config.Registerer is required (e.g. prometheus.NewRegistry())")
	case c.GaugeInterval < 10*time.Millisecond:
		return bad("gauge interval %s is too short: use at least 10ms (the default is %s)", c.GaugeInterval, DefaultGaugeInterval)
	case c.MaxRoutes < 1:
		return bad("max routes %d must be positive", c.MaxRoutes)
	}
	return nil
}

// Histogram buckets, in seconds.
var (
	durationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	lagBuckets      = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	// marginBuckets include 10 s, the deadline-margin SLO's threshold,
	// and non-positive bounds for events that expired.
	marginBuckets = []float64{-60, -10, -1, 0, 1, 5, 10, 30, 60, 300, 3600}
)

// Metrics is a relay.Observer that keeps Prometheus collectors, and the
// refresher of the cluster-wide gauges (RunGauges). Create it with New;
// pass it as relay.Config.Observer.
type Metrics struct {
	cfg Config

	deliveries       *prometheus.CounterVec
	leaseLost        prometheus.Counter
	storeErrors      *prometheus.CounterVec
	publishDuration  *prometheus.HistogramVec
	deliveryLag      *prometheus.HistogramVec
	deadlineMargin   *prometheus.HistogramVec
	claimDuration    prometheus.Histogram
	completeDuration prometheus.Histogram

	routes   sync.Map // route -> *routeMetrics
	routesMu sync.Mutex
	nRoutes  int

	gauges *gauges
	// circuit is outbox_circuit_state (circuit.go).
	circuit *prometheus.GaugeVec
}

var _ relay.Observer = (*Metrics)(nil)

// routeMetrics are one route's series, resolved once.
type routeMetrics struct {
	outcomes                   map[store.OutcomeKind]prometheus.Counter
	publish, lag, deadlineLeft prometheus.Observer
}

// New creates the collectors and registers them on cfg.Registerer.
func New(cfg Config) (*Metrics, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Metrics{
		cfg: cfg,
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_deliveries_total",
			Help: "Outcomes recorded by this relay, by route and outcome (delivered, retried, failed, expired, fenced, released).",
		}, []string{"route", "outcome"}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_lease_lost_total",
			Help: "Events whose lease ended before their outcome was recorded: fenced when this relay recorded them, given up after recording failed until the lease ran out, or returned to PENDING by this relay's reaper (another relay stopped or paused).",
		}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_store_errors_total",
			Help: "Failed database calls of this relay, by operation.",
		}, []string{"op"}),
		publishDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outbox_publish_duration_seconds", Buckets: durationBuckets,
			Help: "Duration of a sink call, once per route it carried.",
		}, []string{"route"}),
		deliveryLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outbox_delivery_lag_seconds", Buckets: lagBuckets,
			Help: "From an event's commit to its recorded delivery, both on the database clock.",
		}, []string{"route"}),
		deadlineMargin: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outbox_deadline_margin_seconds", Buckets: marginBuckets,
			Help: "expires_at minus the delivery time, for events with a deadline; expired events count with their (non-positive) margin.",
		}, []string{"route"}),
		claimDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outbox_claim_duration_seconds", Buckets: durationBuckets,
			Help: "Duration of a claim round trip.",
		}),
		completeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outbox_complete_duration_seconds", Buckets: durationBuckets,
			Help: "Duration of one attempt to record a batch's outcomes.",
		}),
	}
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outbox_relay_info",
		Help: "1 for each running relay, labelled with its id and version.",
	}, []string{"relay_id", "version"})
	info.WithLabelValues(cfg.RelayID, cfg.Version).Set(1)
	collectors := []prometheus.Collector{info}
	if cfg.Store != nil {
		lh, relayID := cfg.Store, cfg.RelayID
		collectors = append(collectors, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outbox_relay_lanes",
			Help: "Lanes this relay holds (of 64 per outbox): its share of the outbox's aggregates.",
		}, func() float64 { return float64(len(lh.HeldLanes(relayID))) }))
	}
	if g := features(cfg.Store).CursorGuard; g != nil {
		collectors = append(collectors, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "outbox_events_found_behind_cursor_total",
			Help: "PENDING events this relay's safety net found behind their lane's cursor, where no claim read them, and handed back to the claims (each also logged as an ERROR). Above 0: ids were drawn out of the order of their transactions (a sequence CACHE above 1, rows written past the insert trigger).",
		}, func() float64 { return float64(g.FoundBehindCursors()) }))
	}
	m.gauges = newGauges(cfg, m.storeErrors)
	m.circuit = newCircuitGauge()
	for _, op := range []string{relay.OpClaim, relay.OpComplete, relay.OpSweep, relay.OpPurge, relay.OpCount, OpSnapshot} {
		m.storeErrors.WithLabelValues(op) // present from the start, at 0
	}
	for _, c := range append(collectors, m.deliveries, m.leaseLost, m.storeErrors, m.publishDuration,
		m.deliveryLag, m.deadlineMargin, m.claimDuration, m.completeDuration, m.gauges, m.circuit) {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return m, nil
}

// route returns the series of route, creating them (every outcome at 0)
// the first time; past MaxRoutes routes, those of OtherRoute.
func (m *Metrics) route(route string) *routeMetrics {
	if rm, ok := m.routes.Load(route); ok {
		return rm.(*routeMetrics)
	}
	m.routesMu.Lock()
	defer m.routesMu.Unlock()
	if rm, ok := m.routes.Load(route); ok {
		return rm.(*routeMetrics)
	}
	label := route
	if m.nRoutes >= m.cfg.MaxRoutes && route != OtherRoute {
		if rm, ok := m.routes.Load(OtherRoute); ok {
			return rm.(*routeMetrics)
		}
		m.cfg.Logger.Warn("metrics: more routes than Config.MaxRoutes; the others are counted as route \"other\"",
			"max_routes", m.cfg.MaxRoutes)
		label = OtherRoute
	}
	rm := &routeMetrics{
		outcomes:     make(map[store.OutcomeKind]prometheus.Counter, len(relay.Outcomes)),
		publish:      m.publishDuration.WithLabelValues(label),
		lag:          m.deliveryLag.WithLabelValues(label),
		deadlineLeft: m.deadlineMargin.WithLabelValues(label),
	}
	for _, o := range relay.Outcomes {
		rm.outcomes[o] = m.deliveries.WithLabelValues(label, o.Label())
	}
	m.routes.Store(label, rm)
	m.nRoutes++
	return rm
}

// ClaimDone implements relay.Observer.
func (m *Metrics) ClaimDone(d time.Duration, _ int, _ error) { m.claimDuration.Observe(d.Seconds()) }

// PublishDone implements relay.Observer.
func (m *Metrics) PublishDone(route string, d time.Duration, _ int) {
	m.route(route).publish.Observe(d.Seconds())
}

// OutcomeRecorded implements relay.Observer.
func (m *Metrics) OutcomeRecorded(o relay.OutcomeInfo) {
	rm := m.route(o.Route)
	if c := rm.outcomes[o.Outcome]; c != nil {
		c.Inc()
	}
	if o.Outcome == store.Delivered {
		rm.lag.Observe(max(o.Lag, 0).Seconds())
	}
	if o.HasDeadline {
		rm.deadlineLeft.Observe(o.DeadlineMargin.Seconds())
	}
}

// CompleteDone implements relay.Observer.
func (m *Metrics) CompleteDone(d time.Duration, _ int, _ error) {
	m.completeDuration.Observe(d.Seconds())
}

// LeaseLost implements relay.Observer.
func (m *Metrics) LeaseLost(events int) { m.leaseLost.Add(float64(events)) }

// SweepDone implements relay.Observer: the reaper's returns count as lost
// leases; events that expired while waiting count as expired outcomes of
// route SweeperRoute and, since they had a deadline they did not meet, in
// the deadline margin with 0.
func (m *Metrics) SweepDone(_ time.Duration, res store.SweepResult, _ error) {
	if res.Reaped > 0 {
		m.leaseLost.Add(float64(res.Reaped))
	}
	if res.Expired > 0 {
		rm := m.route(SweeperRoute)
		rm.outcomes[store.Expired].Add(float64(res.Expired))
		for range min(res.Expired, 10000) {
			rm.deadlineLeft.Observe(0)
		}
	}
}

// StoreError implements relay.Observer.
func (m *Metrics) StoreError(op string, _ error) { m.storeErrors.WithLabelValues(op).Inc() }

// features returns the capabilities st declares; none when st is nil.
func features(st store.Store) store.Features {
	if st == nil {
		return store.Features{}
	}
	return st.Features()
}
