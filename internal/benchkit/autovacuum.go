package benchkit

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Autovacuum's default thresholds: a table is analyzed once more than
// 50 + 10% of its rows changed since the last ANALYZE, and vacuumed once it
// has more than 50 + 20% dead rows.
const (
	analyzeThreshold = 50
	analyzeScale     = 0.1
	vacuumThreshold  = 50
	vacuumScale      = 0.2
	autovacuumNap    = time.Second
)

// startAutovacuum stands in for PostgreSQL's autovacuum on a server where
// it is off (as on the development machine): every second it ANALYZEs and
// VACUUMs the tables of schema that autovacuum, at its default thresholds,
// would. Without it, the planner keeps the statistics of the empty tables a
// run starts with, and cached plans made for an empty table are never
// replaced; every system would be measured in that state, which no
// production server with autovacuum on stays in. The nap is one second
// rather than autovacuum's minute because the runs are seconds long and
// start from empty tables, where a production outbox holds its retention.
func startAutovacuum(ctx context.Context, admin *pgxpool.Pool, schema string, off bool) (stop func()) {
	if off {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(autovacuumNap)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			autovacuumOnce(ctx, admin, schema)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func autovacuumOnce(ctx context.Context, admin *pgxpool.Pool, schema string) {
	rows, err := admin.Query(ctx, `
		SELECT s.relname,
		       s.n_dead_tup > $2 + $3 * greatest(c.reltuples, 0) AS vacuum,
		       s.n_mod_since_analyze > $4 + $5 * greatest(c.reltuples, 0) AS analyze
		FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
		WHERE s.schemaname = $1`,
		schema, vacuumThreshold, vacuumScale, analyzeThreshold, analyzeScale)
	if err != nil {
		return
	}
	type job struct {
		table           string
		vacuum, analyze bool
	}
	var jobs []job
	for rows.Next() {
		var j job
		if rows.Scan(&j.table, &j.vacuum, &j.analyze) == nil && (j.vacuum || j.analyze) {
			jobs = append(jobs, j)
		}
	}
	rows.Close()
	for _, j := range jobs {
		name := pgx.Identifier{schema, j.table}.Sanitize()
		switch {
		case j.vacuum:
			_, _ = admin.Exec(ctx, `VACUUM ANALYZE `+name)
		case j.analyze:
			_, _ = admin.Exec(ctx, `ANALYZE `+name)
		}
	}
}
