package benchkit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// drainTimeout bounds one timed drain.
const drainTimeout = 10 * time.Minute

func (r *runner) drain(ctx context.Context) {
	cfg := r.cfg
	events := make([]Event, cfg.Events)
	for i := range events {
		events[i] = NewEvent(int64(i), cfg.Aggregates)
	}
	runs := map[*contender][]float64{}
	errs := map[*contender]error{}
	dups := map[*contender]int64{}
	profiled := false
	r.each(ScenarioDrain, cfg.Runs, func(c *contender, run int) {
		if errs[c] != nil || ctx.Err() != nil {
			return
		}
		label := fmt.Sprintf("drain %s run %d/%d", c.name, run, cfg.Runs)
		rate, dup, err := r.drainOnce(ctx, c, events, label, &profiled)
		if err != nil {
			errs[c] = fmt.Errorf("run %d: %w", run, err)
			return
		}
		runs[c] = append(runs[c], rate)
		dups[c] += dup
	})
	for _, c := range r.cs {
		if !c.runs(ScenarioDrain) || !c.ready {
			continue
		}
		res := Result{Scenario: ScenarioDrain, System: c.name, Role: c.Role, Runs: runs[c],
			EventsPerSec: median(runs[c]), Duplicates: dups[c]}
		if errs[c] != nil {
			res.Err = errs[c].Error()
		}
		r.report.add(res)
	}
}

// drainOnce loads the backlog (untimed), then times the relay from start
// until the sink has seen every event and the system reports none pending.
func (r *runner) drainOnce(ctx context.Context, c *contender, events []Event, label string, profiled *bool) (float64, int64, error) {
	progress := r.cfg.Progress
	if err := r.clean(ctx, c); err != nil {
		return 0, 0, err
	}
	progress(fmt.Sprintf("%s: loading %d events", label, len(events)))
	if err := c.System.Load(ctx, events); err != nil {
		return 0, 0, fmt.Errorf("load: %w", err)
	}
	if n, err := c.System.Pending(ctx); err != nil {
		return 0, 0, err
	} else if n != int64(len(events)) {
		return 0, 0, fmt.Errorf("load: %d events pending after loading %d", n, len(events))
	}
	if err := r.vacuum(ctx, c); err != nil {
		return 0, 0, err
	}
	var seen atomic.Int64
	sink := func(p [][]byte) { seen.Add(int64(len(p))) }
	n := int64(len(events))

	// No autovacuum stand-in here: the tables were just analyzed, and a
	// drain of seconds ends long before autovacuum's one-minute nap.
	stopProfile := r.profileOnce(c, profiled)
	start := time.Now()
	stop, err := c.System.StartRelay(ctx, sink)
	if err != nil {
		stopProfile()
		return 0, 0, err
	}
	lastReport := start
	err = pollUntil(ctx, time.Millisecond, drainTimeout, func() (bool, error) {
		if now := time.Now(); now.Sub(lastReport) >= time.Second {
			lastReport = now
			progress(fmt.Sprintf("%s: %d/%d delivered, %.0f events/s", label, seen.Load(), n,
				float64(seen.Load())/now.Sub(start).Seconds()))
		}
		return seen.Load() >= n, nil
	})
	if err == nil {
		// Delivered is not done until the system has recorded it.
		err = pollUntil(ctx, 2*time.Millisecond, drainTimeout, func() (bool, error) {
			p, err := c.System.Pending(ctx)
			return p == 0, err
		})
	}
	elapsed := time.Since(start)
	stopProfile()
	if stopErr := stop(); err == nil && stopErr != nil {
		err = fmt.Errorf("relay: %w", stopErr)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("drain (%d of %d seen): %w", seen.Load(), n, err)
	}
	rate := float64(n) / elapsed.Seconds()
	progress(fmt.Sprintf("%s: %.0f events/s (%s)", label, rate, elapsed.Round(time.Millisecond)))
	return rate, seen.Load() - n, nil
}
