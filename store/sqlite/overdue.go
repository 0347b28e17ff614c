package sqlite

import (
	"context"
	"strconv"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// overdueSQL groups the unfinished events past their deadline (see
// backend.OverdueWhere; ?1 is now), with the totals of all groups in every row.
var overdueSQL = `
SELECT aggregate_type, event_type, min(aggregate_id), count(*),
    sum(count(*)) OVER (), min(min(expires_at)) OVER (), max(max(expires_at)) OVER ()
FROM "{{.Outbox}}" WHERE ` + overdueWhere + `
GROUP BY aggregate_type, event_type
ORDER BY count(*) DESC, aggregate_type, event_type
LIMIT ` + overdueGroups

// overdueWhere is backend.OverdueWhere with now as ?1, and overdueGroups
// backend.MaxOverdueGroups: fixed fragments of the statement.
var (
	overdueWhere  = backend.OverdueWhere("?1")
	overdueGroups = strconv.Itoa(backend.MaxOverdueGroups)
)

// Overdue implements store.Store.
func (s *Store) Overdue(ctx context.Context) (store.Overdue, error) {
	q := render(s.t, overdueSQL)
	var o store.Overdue
	err := retryBusy(ctx, func() error {
		o = store.Overdue{}
		var now string
		if err := s.db.QueryRowContext(ctx, nowSQL).Scan(&now); err != nil {
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
