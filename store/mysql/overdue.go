package mysql

import (
	"context"

	"github.com/txoutbox/outbox/store"
)

// Overdue implements store.Store.
func (s *Store) Overdue(ctx context.Context) (store.Overdue, error) {
	rows, err := s.db.QueryContext(ctx, s.q.overdue)
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
