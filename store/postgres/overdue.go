package postgres

import (
	"context"
	"strconv"
	"time"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// overdueSQL groups the unfinished events past their deadline (see
// backend.OverdueWhere): one row per (aggregate type, event type), with the
// totals of all groups in every row.
var overdueSQL = `
SELECT aggregate_type, event_type, min(aggregate_id), count(*),
    sum(count(*)) OVER ()::bigint, min(min(expires_at)) OVER (), max(max(expires_at)) OVER ()
FROM "{{.Outbox}}" WHERE ` + overdueWhere + `
GROUP BY aggregate_type, event_type
ORDER BY count(*) DESC, aggregate_type, event_type
LIMIT ` + overdueGroups

// overdueWhere is backend.OverdueWhere on the database clock (every row
// with a deadline has hold 1 or 2 until it ends, the deadline index), and
// overdueGroups backend.MaxOverdueGroups: fixed fragments of the statement.
var (
	overdueWhere  = "hold > 0 AND " + backend.OverdueWhere("now()")
	overdueGroups = strconv.Itoa(backend.MaxOverdueGroups)
)

// Overdue implements store.Store.
func (s *Store) Overdue(ctx context.Context) (store.Overdue, error) {
	rows, err := s.pool.Query(ctx, s.q.overdue)
	if err != nil {
		return store.Overdue{}, s.wrap("overdue events", err)
	}
	defer rows.Close()
	var o store.Overdue
	for rows.Next() {
		var g store.OverdueGroup
		var oldest, newest time.Time
		if err := rows.Scan(&g.AggregateType, &g.EventType, &g.SampleAggregateID, &g.Count, &o.Count, &oldest, &newest); err != nil {
			return store.Overdue{}, s.wrap("overdue events", err)
		}
		o.Oldest, o.Newest = oldest, newest
		o.Groups = append(o.Groups, g)
	}
	return o, s.wrap("overdue events", rows.Err())
}
