package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/compensation"
)

// compensateExpired enqueues, in tx (the transaction that moved the rows
// ids to EXPIRED, at now), the compensating event of each of them that has
// an on_expired, through the path Enqueue uses (the per-aggregate lock
// included), and links each pair with a COMPENSATED audit row on the
// expired event. A compensating event that already exists (the event was
// requeued and expired again) is not enqueued twice.
func (s *Store) compensateExpired(ctx context.Context, tx *sql.Tx, ids []int64, now time.Time, relay string) error {
	if len(ids) == 0 {
		return nil
	}
	q, err := s.q.byIDs("compensate.select", ids)
	if err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	var xs []compensation.Expired
	for rows.Next() {
		var (
			x                           compensation.Expired
			payload, headers, onExpired []byte
			expiresAt                   nullTime
			retries                     int
		)
		if err := rows.Scan(&x.ID, &x.EventID, &x.AggregateType, &x.AggregateID, &x.EventType,
			&payload, &headers, &expiresAt, &retries, &onExpired); err != nil {
			rows.Close()
			return err
		}
		x.Payload = json.RawMessage(payload)
		x.Headers = backend.DecodeHeaders(headers)
		x.ExpiresAt = expiresAt.Time
		x.Attempt = retries + 1
		x.OnExpired = onExpired
		xs = append(xs, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(xs) == 0 {
		return err
	}
	events, err := compensation.Events(s.cfg.Limits, xs)
	if err != nil {
		return err
	}
	args := make([]any, len(events))
	for i := range events {
		args[i] = events[i].ID.String()
	}
	existing, err := s.q.render("compensate.existing_events", fragments{Marks: "?" + strings.Repeat(",?", len(events)-1)})
	if err != nil {
		return err
	}
	rows, err = tx.QueryContext(ctx, existing, args...)
	if err != nil {
		return err
	}
	exists := map[outbox.EventID]bool{}
	for rows.Next() {
		var id outbox.EventID
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		exists[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var (
		fresh []outbox.Event
		links []attemptRow
	)
	for i := range events {
		if exists[events[i].ID] {
			continue
		}
		fresh = append(fresh, events[i])
		links = append(links, attemptRow{xs[i].EventID, events[i].ID.String(), store.Compensated, xs[i].ID,
			xs[i].Attempt, relay, now, compensation.Note(events[i])})
	}
	if len(fresh) == 0 {
		return nil
	}
	if err := s.WriteEvents(ctx, tx, fresh); err != nil {
		return err
	}
	return s.audit(ctx, tx, links)
}
