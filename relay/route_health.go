package relay

import (
	"log/slog"
	"sync"
	"time"
)

// outageLogEvery is the least time between two WARN lines about one route.
const outageLogEvery = 30 * time.Second

// routeHealth turns recorded outcomes into log lines that show an outage:
// a WARN when deliveries to a route start failing (with the last error and
// a count), another at most every outageLogEvery while they keep failing,
// and an INFO when a batch delivers to the route again without a failure.
// Every relay runs one, fed with each recorded batch.
type routeHealth struct {
	log *slog.Logger
	now func() time.Time

	mu     sync.Mutex
	routes map[string]*routeState
}

type routeState struct {
	failing  bool
	since    time.Time // first failure of this outage
	failures int       // failures since then
	unlogged int       // failures since the last WARN
	lastErr  string
	lastWarn time.Time
	// warned: this outage was logged, so its end is logged too.
	warned bool
}

func newRouteHealth(log *slog.Logger, now func() time.Time) *routeHealth {
	return &routeHealth{log: log, now: now, routes: map[string]*routeState{}}
}

// routeResult is what one recorded batch did on one route.
type routeResult struct {
	delivered, failures int
	lastErr             string
}

// batchRecorded takes the per-route results of one recorded batch: a route
// with failures is failing; one with deliveries and no failure is healthy.
func (h *routeHealth) batchRecorded(results map[string]*routeResult) {
	for route, res := range results {
		switch {
		case res.failures > 0:
			h.failure(route, res.failures, res.lastErr)
		case res.delivered > 0:
			h.success(route)
		}
	}
}

func (h *routeHealth) failure(route string, n int, errText string) {
	now := h.now()
	h.mu.Lock()
	st := h.routes[route]
	if st == nil {
		st = &routeState{}
		h.routes[route] = st
	}
	if !st.failing {
		st.failing, st.since, st.failures, st.unlogged = true, now, 0, 0
	}
	st.failures += n
	st.unlogged += n
	st.lastErr = errText
	if !st.lastWarn.IsZero() && now.Sub(st.lastWarn) < outageLogEvery {
		h.mu.Unlock()
		return
	}
	first := !st.warned
	attrs := []any{"route", route, "failures", st.failures, "since_last_warning", st.unlogged,
		"failing_for", now.Sub(st.since).Round(time.Millisecond), "last_error", st.lastErr}
	st.lastWarn, st.unlogged, st.warned = now, 0, true
	h.mu.Unlock()
	if first {
		h.log.Warn("deliveries to a route are failing; they are retried with backoff", attrs...)
	} else {
		h.log.Warn("deliveries to a route are still failing", attrs...)
	}
}

func (h *routeHealth) success(route string) {
	h.mu.Lock()
	st := h.routes[route]
	if st == nil || !st.failing {
		h.mu.Unlock()
		return
	}
	warned := st.warned
	attrs := []any{"route", route, "failures", st.failures, "down_for", h.now().Sub(st.since).Round(time.Millisecond)}
	st.failing, st.warned = false, false
	h.mu.Unlock()
	if warned {
		h.log.Info("route recovered: deliveries succeed again", attrs...)
	}
}
