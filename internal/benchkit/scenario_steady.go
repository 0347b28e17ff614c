package benchkit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// steadyRun is one run of the steady scenario: the same producer load
// without and with the relay.
type steadyRun struct {
	baseline, withRelay float64 // producer tx/s
	delivered           float64 // events/s the relay delivered meanwhile
	backlog             int64   // events pending when the producers stopped
}

func (r *runner) steady(ctx context.Context) {
	cfg := r.cfg
	runs := map[*contender][]steadyRun{}
	errs := map[*contender]error{}
	r.each(ScenarioSteady, cfg.Runs, func(c *contender, run int) {
		if errs[c] != nil || ctx.Err() != nil {
			return
		}
		label := fmt.Sprintf("steady %s run %d/%d", c.name, run, cfg.Runs)
		var sr steadyRun
		// Alternate which phase goes first, so that a drift in the machine's
		// load does not always favour the same one.
		for _, withRelay := range []bool{run%2 == 0, run%2 != 0} {
			res, err := r.steadyPhase(ctx, c, withRelay, label)
			if err != nil {
				errs[c] = fmt.Errorf("run %d: %w", run, err)
				return
			}
			if withRelay {
				sr.withRelay, sr.delivered, sr.backlog = res.withRelay, res.delivered, res.backlog
			} else {
				sr.baseline = res.baseline
			}
		}
		runs[c] = append(runs[c], sr)
	})
	for _, c := range r.cs {
		if !c.runs(ScenarioSteady) || !c.ready {
			continue
		}
		var base, with, share, deliv []float64
		var backlog []float64
		for _, sr := range runs[c] {
			base = append(base, sr.baseline)
			with = append(with, sr.withRelay)
			share = append(share, sr.withRelay/sr.baseline)
			deliv = append(deliv, sr.delivered)
			backlog = append(backlog, float64(sr.backlog))
		}
		res := Result{Scenario: ScenarioSteady, System: c.name, Role: c.Role,
			TxPerSec: median(with), BaselineTxPerSec: median(base), Share: median(share),
			EventsPerSec: median(deliv), Backlog: int64(median(backlog)), Runs: share}
		if errs[c] != nil {
			res.Err = errs[c].Error()
		}
		r.report.add(res)
	}
}

func (r *runner) steadyPhase(ctx context.Context, c *contender, withRelay bool, label string) (steadyRun, error) {
	var out steadyRun
	if err := r.clean(ctx, c); err != nil {
		return out, err
	}
	stopAutovacuum := r.autovacuum(ctx, c)
	defer stopAutovacuum()
	phase := "no relay"
	var delivered atomic.Int64
	stop := func() error { return nil }
	if withRelay {
		phase = "relay running"
		var err error
		stop, err = c.System.StartRelay(ctx, func(p [][]byte) { delivered.Add(int64(len(p))) })
		if err != nil {
			return out, err
		}
		time.Sleep(200 * time.Millisecond) // let it connect and go idle
	}
	r.cfg.Progress(fmt.Sprintf("%s: %d producers for %s, %s", label, r.cfg.Producers, r.cfg.Duration, phase))
	var seq atomic.Int64
	start := time.Now()
	before := delivered.Load()
	n, err := produceFor(ctx, c.producer, c.System, r.cfg.Producers, r.cfg.Aggregates, r.cfg.Duration, &seq)
	elapsed := time.Since(start)
	deliveredDuring := delivered.Load() - before
	if err == nil && withRelay {
		out.backlog, err = c.System.Pending(ctx)
	}
	if stopErr := stop(); err == nil && stopErr != nil {
		err = fmt.Errorf("relay: %w", stopErr)
	}
	if err != nil {
		return out, err
	}
	rate := float64(n) / elapsed.Seconds()
	if withRelay {
		out.withRelay = rate
		out.delivered = float64(deliveredDuring) / elapsed.Seconds()
	} else {
		out.baseline = rate
	}
	r.cfg.Progress(fmt.Sprintf("%s: %s: %.0f tx/s", label, phase, rate))
	return out, nil
}
