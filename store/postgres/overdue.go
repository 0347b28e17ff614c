package postgres

import (
	"context"
	"time"

	"github.com/txoutbox/outbox/store"
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
