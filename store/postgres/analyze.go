package postgres

import (
	"context"
	"sync"
	"time"
)

// analyzer keeps the planner's statistics of the outbox table fresh when
// autovacuum is off (globally or for the table): the claim's cached plans
// are only as good as the statistics they were made with, and an outbox
// table goes from empty to a large backlog and back within minutes. It
// follows autovacuum's own rule (50 rows plus 10% of the table changed
// since the last ANALYZE, as the statistics views report it) and runs at
// most once a minute. With autovacuum on, it does nothing.
type analyzer struct {
	mu      sync.Mutex
	last    time.Time
	refused bool // ANALYZE was refused (not the table's owner): stop trying
}

const analyzeEvery = time.Minute

func (s *Store) maybeAnalyze(ctx context.Context) {
	a := &s.analyze
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refused || time.Since(a.last) < analyzeEvery {
		return
	}
	var stale bool
	err := s.pool.QueryRow(ctx, s.q.analyzeStale, s.q.outboxName).Scan(&stale)
	if err != nil || !stale {
		return
	}
	a.last = time.Now()
	if _, err := s.pool.Exec(ctx, s.q.analyze); err != nil {
		if ctx.Err() == nil {
			a.refused = true
			s.log.Info("autovacuum is off and ANALYZE of the outbox table was refused; claims may use stale plans until the table is analyzed",
				"table", s.t.Outbox, "err", err)
		}
		return
	}
	s.log.Debug("analyzed the outbox table (autovacuum is off)", "table", s.t.Outbox)
}
