package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
)

var _ relay.BreakerObserver = (*Metrics)(nil)

func newCircuitGauge() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outbox_circuit_state",
		Help: "State of each route's circuit breaker, as every relay reads it from the database: 0 closed, 1 half-open (one probe in flight), 2 open (the route's events wait).",
	}, []string{"route"})
}

// CircuitStateValue is the value of outbox_circuit_state for a state.
func CircuitStateValue(s store.BreakerState) float64 {
	switch s {
	case store.BreakerHalfOpen:
		return 1
	case store.BreakerOpen:
		return 2
	}
	return 0
}

// BreakerState implements relay.BreakerObserver: it sets the route's
// outbox_circuit_state. Past Config.MaxRoutes routes, a route is not
// given a series of its own (a state cannot be summed into "other").
func (m *Metrics) BreakerState(route string, state store.BreakerState) {
	m.routesMu.Lock()
	known := false
	if _, ok := m.routes.Load(route); ok {
		known = true
	}
	room := m.nRoutes < m.cfg.MaxRoutes
	m.routesMu.Unlock()
	if !known && !room {
		return
	}
	m.circuit.WithLabelValues(route).Set(CircuitStateValue(state))
}
