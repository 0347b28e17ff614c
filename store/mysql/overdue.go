package mysql

import (
	"context"
	"strconv"
	"strings"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

var _ store.OverdueReporter = (*Store)(nil)

// overdueSQL groups the unfinished events past their deadline (see
// backend.OverdueWhere), with the totals of all groups in every row.
const overdueSQL = "SELECT aggregate_type, event_type, MIN(aggregate_id), COUNT(*), " +
	"CAST(SUM(COUNT(*)) OVER () AS SIGNED), MIN(MIN(expires_at)) OVER (), MAX(MAX(expires_at)) OVER () " +
	"FROM `{t}` WHERE {where} GROUP BY aggregate_type, event_type " +
	"ORDER BY COUNT(*) DESC, aggregate_type, event_type LIMIT {groups}"

// Overdue implements store.OverdueReporter.
func (s *Store) Overdue(ctx context.Context) (store.Overdue, error) {
	q := strings.NewReplacer("{t}", s.t.Outbox, "{where}", strings.ReplaceAll(backend.OverdueWhere, "{now}", "UTC_TIMESTAMP(6)"),
		"{groups}", strconv.Itoa(backend.MaxOverdueGroups)).Replace(overdueSQL)
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return store.Overdue{}, s.wrap("overdue events", err)
	}
	defer rows.Close()
	var o store.Overdue
	for rows.Next() {
		var g store.OverdueGroup
		var oldest, newest nullTime
		if err := rows.Scan(&g.AggregateType, &g.EventType, &g.SampleAggregateID, &g.Count, &o.Count, &oldest, &newest); err != nil {
			return store.Overdue{}, s.wrap("overdue events", err)
		}
		o.Oldest, o.Newest = oldest.Time, newest.Time
		o.Groups = append(o.Groups, g)
	}
	return o, s.wrap("overdue events", rows.Err())
}
