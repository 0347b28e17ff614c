package sqlite

import (
	"context"

	"github.com/txoutbox/outbox/store"
)

// Overdue implements store.Store.
func (s *Store) Overdue(ctx context.Context) (store.Overdue, error) {
	q := s.q.overdue
	var o store.Overdue
	err := retryBusy(ctx, func() error {
		o = store.Overdue{}
		var now string
		if err := s.db.QueryRowContext(ctx, s.q.now).Scan(&now); err != nil {
			return err
		}
		rows, err := s.db.QueryContext(ctx, q, now)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var g store.OverdueGroup
			var oldest, newest string
			if err := rows.Scan(&g.AggregateType, &g.EventType, &g.SampleAggregateID, &g.Count, &o.Count, &oldest, &newest); err != nil {
				return err
			}
			if o.Oldest, err = parseTime(oldest); err != nil {
				return err
			}
			if o.Newest, err = parseTime(newest); err != nil {
				return err
			}
			o.Groups = append(o.Groups, g)
		}
		return rows.Err()
	})
	return o, s.wrap("overdue events", err)
}
