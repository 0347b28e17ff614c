package benchkit

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// latencyRun holds one latency run's samples.
type latencyRun struct {
	samples             []time.Duration
	produced, delivered int64
	achieved            float64 // committed events/s
}

func (r *runner) latency(ctx context.Context) {
	cfg := r.cfg
	for _, rate := range cfg.Rates {
		samples := map[*contender]*latencyRun{}
		errs := map[*contender]error{}
		r.each(ScenarioLatency, cfg.LatencyRuns, func(c *contender, run int) {
			if errs[c] != nil || ctx.Err() != nil {
				return
			}
			label := fmt.Sprintf("latency %s %d/s run %d/%d", c.name, rate, run, cfg.LatencyRuns)
			lr, err := r.latencyOnce(ctx, c, rate, label)
			if err != nil {
				errs[c] = fmt.Errorf("run %d: %w", run, err)
				return
			}
			acc := samples[c]
			if acc == nil {
				acc = &latencyRun{}
				samples[c] = acc
			}
			acc.samples = append(acc.samples, lr.samples...)
			acc.produced += lr.produced
			acc.delivered += lr.delivered
			acc.achieved += lr.achieved / float64(cfg.LatencyRuns)
		})
		for _, c := range r.cs {
			if !c.runs(ScenarioLatency) || !c.ready {
				continue
			}
			res := Result{Scenario: ScenarioLatency, System: c.name, Role: c.Role, Rate: rate}
			if acc := samples[c]; acc != nil {
				sort.Slice(acc.samples, func(i, j int) bool { return acc.samples[i] < acc.samples[j] })
				res.P50 = percentile(acc.samples, 0.50)
				res.P99 = percentile(acc.samples, 0.99)
				res.P999 = percentile(acc.samples, 0.999)
				if len(acc.samples) > 0 {
					res.Max = acc.samples[len(acc.samples)-1]
				}
				res.Produced, res.Delivered = acc.produced, acc.delivered
				res.TxPerSec = acc.achieved
			}
			if errs[c] != nil {
				res.Err = errs[c].Error()
			}
			r.report.add(res)
		}
	}
}

// latencyOnce offers rate events/s for Duration with paced producers and
// measures, per event, the time from "COMMIT returned" to "the sink saw it".
func (r *runner) latencyOnce(ctx context.Context, c *contender, rate int, label string) (latencyRun, error) {
	var out latencyRun
	if err := r.clean(ctx, c); err != nil {
		return out, err
	}
	stopAutovacuum := r.autovacuum(ctx, c)
	defer stopAutovacuum()
	total := int(float64(rate) * r.cfg.Duration.Seconds())
	committedAt := make([]atomic.Int64, total) // ns since base, 0 = not yet
	seenAt := make([]atomic.Int64, total)
	base := time.Now()
	var seen, dups atomic.Int64
	sink := func(ps [][]byte) {
		now := int64(time.Since(base))
		for _, p := range ps {
			k := Seq(p)
			if k < 0 || k >= int64(total) {
				continue
			}
			if seenAt[k].CompareAndSwap(0, now) {
				seen.Add(1)
			} else {
				dups.Add(1)
			}
		}
	}
	stop, err := c.System.StartRelay(ctx, sink)
	if err != nil {
		return out, err
	}
	time.Sleep(500 * time.Millisecond) // let the relay connect and go idle

	// The pacer releases event k at start + k/rate; producers take them in
	// order. A producer that falls behind does not lower the offered load:
	// the due events wait for it (their wait is before COMMIT, so it is not
	// in the measured latency, but the achieved rate shows it).
	due := make(chan int, total)
	pctx, cancelProducers := context.WithCancel(ctx)
	defer cancelProducers()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		produced atomic.Int64
	)
	for range r.cfg.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range due {
				if pctx.Err() != nil {
					return
				}
				if err := producerTx(pctx, c.producer, c.System, NewEvent(int64(k), r.cfg.Aggregates), int64(k)); err != nil {
					errOnce.Do(func() { firstErr = err; cancelProducers() })
					return
				}
				committedAt[k].Store(max(int64(time.Since(base)), 1))
				produced.Add(1)
			}
		}()
	}
	r.cfg.Progress(fmt.Sprintf("%s: offering %d events/s for %s", label, rate, r.cfg.Duration))
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	next := 0
	for next < total && pctx.Err() == nil {
		<-tick.C
		for upTo := min(int(time.Since(start).Seconds()*float64(rate))+1, total); next < upTo; next++ {
			due <- next
		}
	}
	tick.Stop()
	close(due)
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr == nil {
		// Give the relay time to deliver the tail.
		firstErr = pollUntil(ctx, time.Millisecond, 30*time.Second, func() (bool, error) {
			return seen.Load() >= produced.Load(), nil
		})
	}
	if stopErr := stop(); firstErr == nil && stopErr != nil {
		firstErr = fmt.Errorf("relay: %w", stopErr)
	}
	if firstErr != nil {
		return out, fmt.Errorf("%d produced, %d delivered: %w", produced.Load(), seen.Load(), firstErr)
	}
	out.samples = make([]time.Duration, 0, total)
	for k := range total {
		ct, st := committedAt[k].Load(), seenAt[k].Load()
		if ct == 0 || st == 0 {
			continue
		}
		// A relay may see an event before its producer has taken the time
		// after COMMIT returned: that latency is 0.
		out.samples = append(out.samples, time.Duration(max(st-ct, 0)))
	}
	out.produced, out.delivered = produced.Load(), seen.Load()
	out.achieved = float64(out.produced) / elapsed.Seconds()
	r.cfg.Progress(fmt.Sprintf("%s: %d delivered", label, out.delivered))
	return out, nil
}
