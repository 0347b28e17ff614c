package benchkit

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// rowCounts are a schema's cumulative row-version counters from
// pg_stat_user_tables: what its tables had inserted, updated (of which
// HOT, without new index entries) and deleted.
type rowCounts struct {
	ins, upd, hot, del float64
	perTable           map[string][4]float64
}

// RowVersions is what one drain wrote to a system's tables, per delivered
// event: every insert and update leaves a new row version (a HOT update's
// without new index entries), every delete a dead one for vacuum.
type RowVersions struct {
	Inserts    float64 `json:"inserts"`
	Updates    float64 `json:"updates"`
	HOTUpdates float64 `json:"hot_updates"`
	Deletes    float64 `json:"deletes"`
	// Tables breaks the same down by table: "table ins/upd(hot)/del".
	Tables string `json:"tables,omitempty"`
}

// Written is the number of row versions written per event (inserts and
// updates); a delete writes no new version, it marks one dead.
func (v RowVersions) Written() float64 { return v.Inserts + v.Updates }

// statsSettle is how long a schema's counters must stay unchanged before
// they are taken as flushed. PostgreSQL 15 flushes a backend's table
// counters to shared memory at most once a second, and an idle backend's
// within 10 seconds (PGSTAT_IDLE_INTERVAL); a backend that exits flushes at
// once.
const statsSettle = 11 * time.Second

// settledRowCounts waits until the schema's counters stop moving, then
// returns them.
func (r *runner) settledRowCounts(ctx context.Context, schema string) (rowCounts, error) {
	last, err := r.rowCounts(ctx, schema)
	if err != nil {
		return rowCounts{}, err
	}
	stableSince := time.Now()
	err = pollUntil(ctx, 500*time.Millisecond, 2*time.Minute, func() (bool, error) {
		now, err := r.rowCounts(ctx, schema)
		if err != nil {
			return false, err
		}
		if now.ins != last.ins || now.upd != last.upd || now.del != last.del {
			last, stableSince = now, time.Now()
			return false, nil
		}
		return time.Since(stableSince) >= statsSettle, nil
	})
	if err != nil {
		return rowCounts{}, fmt.Errorf("wait for the table statistics to settle: %w", err)
	}
	return last, nil
}

func (r *runner) rowCounts(ctx context.Context, schema string) (rowCounts, error) {
	rows, err := r.admin.Query(ctx, `SELECT relname, n_tup_ins::float8, n_tup_upd::float8, n_tup_hot_upd::float8, n_tup_del::float8
		FROM pg_stat_user_tables WHERE schemaname = $1`, schema)
	if err != nil {
		return rowCounts{}, fmt.Errorf("read pg_stat_user_tables: %w", err)
	}
	defer rows.Close()
	c := rowCounts{perTable: map[string][4]float64{}}
	for rows.Next() {
		var name string
		var v [4]float64
		if err := rows.Scan(&name, &v[0], &v[1], &v[2], &v[3]); err != nil {
			return rowCounts{}, err
		}
		c.perTable[name] = v
		c.ins += v[0]
		c.upd += v[1]
		c.hot += v[2]
		c.del += v[3]
	}
	return c, rows.Err()
}

// rowVersionsBetween divides what was written from one reading to the
// next by the number of events.
func rowVersionsBetween(before, after rowCounts, events int64) RowVersions {
	n := float64(events)
	v := RowVersions{Inserts: (after.ins - before.ins) / n, Updates: (after.upd - before.upd) / n,
		HOTUpdates: (after.hot - before.hot) / n, Deletes: (after.del - before.del) / n}
	names := make([]string, 0, len(after.perTable))
	for name := range after.perTable {
		names = append(names, name)
	}
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		a, b := after.perTable[name], before.perTable[name]
		d := [4]float64{(a[0] - b[0]) / n, (a[1] - b[1]) / n, (a[2] - b[2]) / n, (a[3] - b[3]) / n}
		if d == [4]float64{} {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f/%.2f(%.2f)/%.2f", name, d[0], d[1], d[2], d[3]))
	}
	v.Tables = strings.Join(parts, ", ")
	return v
}
