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
	wal := map[*contender][]float64{}
	errs := map[*contender]error{}
	dups := map[*contender]int64{}
	versions := map[*contender]*RowVersions{}
	profiled := false
	r.each(ScenarioDrain, cfg.Runs, func(c *contender, run int) {
		if errs[c] != nil || ctx.Err() != nil {
			return
		}
		label := fmt.Sprintf("drain %s run %d/%d", c.name, run, cfg.Runs)
		// Row versions are counted on each system's first run only: the
		// counters need seconds to settle before and after.
		d, err := r.drainOnce(ctx, c, events, label, &profiled, versions[c] == nil)
		if err != nil {
			errs[c] = fmt.Errorf("run %d: %w", run, err)
			return
		}
		runs[c] = append(runs[c], d.rate)
		wal[c] = append(wal[c], d.walPerEvent)
		dups[c] += d.duplicates
		if d.rows != nil {
			versions[c] = d.rows
		}
	})
	for _, c := range r.cs {
		if !c.runs(ScenarioDrain) || !c.ready {
			continue
		}
		res := Result{Scenario: ScenarioDrain, System: c.name, Role: c.Role, Runs: runs[c],
			EventsPerSec: median(runs[c]), Duplicates: dups[c], WALBytesPerEvent: median(wal[c]),
			RowVersions: versions[c]}
		if errs[c] != nil {
			res.Err = errs[c].Error()
		}
		r.report.add(res)
	}
}

// drainRun is one timed drain's figures.
type drainRun struct {
	rate        float64 // events/s
	duplicates  int64   // events the sink saw more than once
	walPerEvent float64 // WAL bytes the server wrote during the drain, per event
	rows        *RowVersions
}

// drainOnce loads the backlog (untimed), then times the relay from start
// until the sink has seen every event and the system reports none pending.
// The WAL written in that time (pg_current_wal_lsn before and after) is
// the whole server's: run on a server nothing else writes to. With
// countRows, the row versions written to the system's own tables
// (pg_stat_user_tables) are counted too, once the counters have settled
// before the relay starts and after it stops.
func (r *runner) drainOnce(ctx context.Context, c *contender, events []Event, label string, profiled *bool, countRows bool) (drainRun, error) {
	progress := r.cfg.Progress
	if err := r.clean(ctx, c); err != nil {
		return drainRun{}, err
	}
	progress(fmt.Sprintf("%s: loading %d events", label, len(events)))
	if err := c.System.Load(ctx, events); err != nil {
		return drainRun{}, fmt.Errorf("load: %w", err)
	}
	if n, err := c.System.Pending(ctx); err != nil {
		return drainRun{}, err
	} else if n != int64(len(events)) {
		return drainRun{}, fmt.Errorf("load: %d events pending after loading %d", n, len(events))
	}
	if err := r.vacuum(ctx, c); err != nil {
		return drainRun{}, err
	}
	var (
		seen atomic.Int64
		err  error
	)
	sink := func(p [][]byte) { seen.Add(int64(len(p))) }
	n := int64(len(events))

	var rowsBefore rowCounts
	if countRows {
		progress(fmt.Sprintf("%s: waiting for the table statistics to settle", label))
		if rowsBefore, err = r.settledRowCounts(ctx, c.schema); err != nil {
			return drainRun{}, err
		}
	}
	// No autovacuum stand-in here: the tables were just analyzed, and a
	// drain of seconds ends long before autovacuum's one-minute nap.
	walStart, err := r.walLSN(ctx)
	if err != nil {
		return drainRun{}, err
	}
	stopProfile := r.profileOnce(c, profiled)
	start := time.Now()
	stop, err := c.System.StartRelay(ctx, sink)
	if err != nil {
		stopProfile()
		return drainRun{}, err
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
	var (
		walBytes float64
		walEnd   string
	)
	if err == nil {
		walEnd, err = r.walLSN(ctx)
	}
	if err == nil {
		walBytes, err = r.walBetween(ctx, walStart, walEnd)
	}
	stopProfile()
	if stopErr := stop(); err == nil && stopErr != nil {
		err = fmt.Errorf("relay: %w", stopErr)
	}
	if err != nil {
		return drainRun{}, fmt.Errorf("drain (%d of %d seen): %w", seen.Load(), n, err)
	}
	rate := float64(n) / elapsed.Seconds()
	progress(fmt.Sprintf("%s: %.0f events/s (%s)", label, rate, elapsed.Round(time.Millisecond)))
	perEvent := walBytes / float64(n)
	// The LSN range lets pg_waldump --stats=record --start A --end B
	// break the WAL down by record kind and full-page images.
	progress(fmt.Sprintf("%s: %.0f WAL bytes per event (LSN %s to %s)", label, perEvent, walStart, walEnd))
	d := drainRun{rate: rate, duplicates: seen.Load() - n, walPerEvent: perEvent}
	if countRows {
		after, err := r.settledRowCounts(ctx, c.schema)
		if err != nil {
			return drainRun{}, err
		}
		v := rowVersionsBetween(rowsBefore, after, n)
		d.rows = &v
		progress(fmt.Sprintf("%s: row versions per event: %.2f inserted, %.2f updated (%.2f HOT), %.2f deleted: %s",
			label, v.Inserts, v.Updates, v.HOTUpdates, v.Deletes, v.Tables))
	}
	return d, nil
}

// walLSN is the server's current WAL insert position.
func (r *runner) walLSN(ctx context.Context) (string, error) {
	var lsn string
	if err := r.admin.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		return "", fmt.Errorf("read the WAL position: %w", err)
	}
	return lsn, nil
}

// walBetween is the number of WAL bytes from one position to another.
func (r *runner) walBetween(ctx context.Context, from, to string) (float64, error) {
	var bytes float64
	if err := r.admin.QueryRow(ctx, `SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::float8`, from, to).Scan(&bytes); err != nil {
		return 0, fmt.Errorf("read the WAL written: %w", err)
	}
	return bytes, nil
}
