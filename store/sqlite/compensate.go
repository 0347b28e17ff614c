package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/google/uuid"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/compensation"
)

// scanExpired reads rows of complete.expired_rows' columns (compensate.expire returns
// them too); rows without on_expired are counted, not returned.
func scanExpired(rows *sql.Rows) (xs []compensation.Expired, n int64, err error) {
	defer rows.Close()
	for rows.Next() {
		var (
			x                compensation.Expired
			eventID          string
			payload, headers string
			expiresAt        sql.NullString
			retries          int64
			onExpired        sql.NullString
		)
		if err := rows.Scan(&x.ID, &eventID, &x.AggregateType, &x.AggregateID, &x.EventType,
			&payload, &headers, &expiresAt, &retries, &onExpired); err != nil {
			return nil, 0, err
		}
		n++
		if !onExpired.Valid {
			continue
		}
		if x.EventID, err = outbox.ParseEventID(eventID); err != nil {
			return nil, 0, err
		}
		if x.ExpiresAt, err = parseNullTime(expiresAt); err != nil {
			return nil, 0, err
		}
		x.Payload = json.RawMessage(payload)
		x.Headers = backend.DecodeHeaders([]byte(headers))
		x.Attempt = int(retries) + 1
		x.OnExpired = []byte(onExpired.String)
		xs = append(xs, x)
	}
	return xs, n, rows.Err()
}

// compensate enqueues, in the write transaction that moved xs to EXPIRED,
// the compensating event of each of xs through the statement Enqueue
// uses, and links each pair with a COMPENSATED audit row on the expired
// event. A compensating event that already exists (the event was
// requeued and expired again) is not enqueued twice.
func (s *Store) compensate(ctx context.Context, c *sql.Conn, now string, xs []compensation.Expired, relayID string) error {
	if len(xs) == 0 {
		return nil
	}
	events, err := compensation.Events(s.cfg.Limits, xs)
	if err != nil {
		return err
	}
	var fresh []outbox.Event
	var from []compensation.Expired
	for i := range events {
		var exists bool
		if err := c.QueryRowContext(ctx, s.q.eventExists,
			events[i].ID.String()).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			fresh = append(fresh, events[i])
			from = append(from, xs[i])
		}
	}
	for start := 0; start < len(fresh); start += maxRowsPerInsert {
		end := min(start+maxRowsPerInsert, len(fresh))
		query, args, err := s.insertStatement(fresh[start:end])
		if err != nil {
			return err
		}
		if _, err := c.ExecContext(ctx, query, args...); err != nil {
			return err
		}
	}
	for i := range fresh {
		if _, err := c.ExecContext(ctx, s.q.audit, from[i].EventID.String(), fresh[i].ID.String(), string(store.Compensated),
			from[i].ID, from[i].Attempt, relayID, now, compensation.Note(fresh[i])); err != nil {
			return err
		}
	}
	return nil
}

// expirePage ends one page of waiting events past their deadline, with an
// audit row each.
func (s *Store) expirePage(ctx context.Context, c *sql.Conn, now string, limit int, relay string) (int64, error) {
	type expired struct {
		id, retries int64
		eventID     string
		lastError   string
		comp        *compensation.Expired
	}
	rows, err := c.QueryContext(ctx, s.q.expire, now, limit)
	if err != nil {
		return 0, err
	}
	var es []expired
	for rows.Next() {
		var (
			e                                     expired
			aggType, aggID, evType, payload, hdrs string
			expiresAt, onExpired                  sql.NullString
		)
		if err := rows.Scan(&e.id, &e.eventID, &aggType, &aggID, &evType, &payload, &hdrs, &expiresAt,
			&e.retries, &onExpired, &e.lastError); err != nil {
			rows.Close()
			return 0, err
		}
		if onExpired.Valid {
			x := compensation.Expired{ID: e.id, AggregateType: aggType, AggregateID: aggID, EventType: evType,
				Payload: json.RawMessage(payload), Headers: backend.DecodeHeaders([]byte(hdrs)),
				Attempt: int(e.retries) + 1, OnExpired: []byte(onExpired.String)}
			if x.EventID, err = outbox.ParseEventID(e.eventID); err == nil {
				x.ExpiresAt, err = parseNullTime(expiresAt)
			}
			if err != nil {
				rows.Close()
				return 0, err
			}
			e.comp = &x
		}
		es = append(es, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var xs []compensation.Expired
	for _, e := range es {
		if _, err := c.ExecContext(ctx, s.q.audit, e.eventID, uuid.NewString(), string(store.Expired), e.id,
			e.retries+1, relay, now, e.lastError); err != nil {
			return 0, err
		}
		if e.comp != nil {
			xs = append(xs, *e.comp)
		}
	}
	if err := s.compensate(ctx, c, now, xs, relay); err != nil {
		return 0, err
	}
	return int64(len(es)), nil
}
