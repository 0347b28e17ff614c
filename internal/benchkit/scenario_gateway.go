package benchkit

import (
	"context"
	"fmt"
	"time"
)

// gatewayRun is one timed gateway drain's figures.
type gatewayRun struct {
	rate       float64 // events/s
	duplicates int64
	violations int64
}

// gateway runs the sink-bound scenario: a backlog delivered over HTTP to
// a gateway that takes cfg.GatewayDelay per request, once for every relay
// count in cfg.Relays, by every contender that is a GatewaySystem.
func (r *runner) gateway(ctx context.Context) {
	cfg := r.cfg
	events := make([]Event, cfg.GatewayEvents)
	for i := range events {
		events[i] = NewEvent(int64(i), cfg.Aggregates)
	}
	gw, err := NewGateway(cfg.GatewayDelay, len(events), cfg.Aggregates)
	if err != nil {
		r.report.add(Result{Scenario: ScenarioGateway, System: "gateway", Role: Reference, Err: err.Error()})
		return
	}
	defer gw.Close()
	for _, relays := range cfg.Relays {
		type key = *contender
		runs := map[key][]float64{}
		errs := map[key]error{}
		dups := map[key]int64{}
		viol := map[key]int64{}
		r.each(ScenarioGateway, cfg.Runs, func(c *contender, run int) {
			gs, ok := c.System.(GatewaySystem)
			if !ok || errs[c] != nil || ctx.Err() != nil {
				return
			}
			label := fmt.Sprintf("gateway %s, %d relay(s), run %d/%d", c.name, relays, run, cfg.Runs)
			g, err := r.gatewayOnce(ctx, c, gs, gw, events, relays, label)
			if err != nil {
				errs[c] = fmt.Errorf("run %d: %w", run, err)
				return
			}
			runs[c] = append(runs[c], g.rate)
			dups[c] += g.duplicates
			viol[c] += g.violations
		})
		for _, c := range r.cs {
			if _, ok := c.System.(GatewaySystem); !ok || !c.runs(ScenarioGateway) || !c.ready {
				continue
			}
			res := Result{Scenario: ScenarioGateway, System: c.name, Role: c.Role, Relays: relays, Runs: runs[c],
				EventsPerSec: median(runs[c]), Duplicates: dups[c], OrderViolations: viol[c]}
			if errs[c] != nil {
				res.Err = errs[c].Error()
			}
			r.report.add(res)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// gatewayTimeout bounds one timed gateway drain: the drain's bound plus
// the time every event would take one after another.
func gatewayTimeout(events int, delay time.Duration) time.Duration {
	return drainTimeout + time.Duration(events)*delay
}

// gatewayOnce loads the backlog (untimed), then times the relays from
// start until the gateway has answered every event and the system reports
// none pending.
func (r *runner) gatewayOnce(ctx context.Context, c *contender, gs GatewaySystem, gw *Gateway, events []Event, relays int, label string) (gatewayRun, error) {
	progress := r.cfg.Progress
	if err := r.clean(ctx, c); err != nil {
		return gatewayRun{}, err
	}
	progress(fmt.Sprintf("%s: loading %d events", label, len(events)))
	if err := gs.GatewayLoad(ctx, events); err != nil {
		return gatewayRun{}, fmt.Errorf("load: %w", err)
	}
	n := int64(len(events))
	if p, err := gs.GatewayPending(ctx); err != nil {
		return gatewayRun{}, err
	} else if p != n {
		return gatewayRun{}, fmt.Errorf("load: %d events pending after loading %d", p, n)
	}
	if err := r.vacuum(ctx, c); err != nil {
		return gatewayRun{}, err
	}
	gw.Reset()
	timeout := gatewayTimeout(len(events), r.cfg.GatewayDelay)
	start := time.Now()
	stop, err := gs.StartGateway(ctx, GatewayTarget{URL: gw.URL(), Relays: relays, Aggregates: r.cfg.Aggregates})
	if err != nil {
		return gatewayRun{}, err
	}
	lastReport := start
	err = pollUntil(ctx, time.Millisecond, timeout, func() (bool, error) {
		if now := time.Now(); now.Sub(lastReport) >= time.Second {
			lastReport = now
			progress(fmt.Sprintf("%s: %d/%d delivered, %.0f events/s", label, gw.Delivered(), n,
				float64(gw.Delivered())/now.Sub(start).Seconds()))
		}
		return gw.Delivered() >= n, nil
	})
	if err == nil {
		err = pollUntil(ctx, 2*time.Millisecond, timeout, func() (bool, error) {
			p, err := gs.GatewayPending(ctx)
			return p == 0, err
		})
	}
	elapsed := time.Since(start)
	if stopErr := stop(); err == nil && stopErr != nil {
		err = fmt.Errorf("relay: %w", stopErr)
	}
	if err != nil {
		return gatewayRun{}, fmt.Errorf("drain (%d of %d delivered): %w", gw.Delivered(), n, err)
	}
	if bad, first := gw.Invalid(); bad > 0 {
		return gatewayRun{}, fmt.Errorf("%w: %d, the first: %s", errInvalidRequests, bad, first)
	}
	g := gatewayRun{rate: float64(n) / elapsed.Seconds(), duplicates: gw.Duplicates(), violations: gw.Violations()}
	progress(fmt.Sprintf("%s: %.0f events/s (%s), %d order violations, %d duplicates", label, g.rate,
		elapsed.Round(time.Millisecond), g.violations, g.duplicates))
	return g, nil
}
