package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/compensation"
)

// The statements that move rows to EXPIRED (compensate.expire of
// sql/compensate.sql, complete.expiring of sql/complete.sql) return them as expiredColumns: id, event_id,
// aggregate_type, aggregate_id, event_type, payload, headers, expires_at,
// retry_count, on_expired; scanExpiredRow reads them.

// scanExpiredRow reads one row of expiredColumns; OnExpired stays nil
// when the column is NULL.
func scanExpiredRow(rows pgx.Rows) (compensation.Expired, error) {
	var (
		x                compensation.Expired
		eventID          [16]byte
		payload, headers []byte
		expiresAt        *time.Time
		retries          int
		onExpired        []byte
	)
	if err := rows.Scan(&x.ID, &eventID, &x.AggregateType, &x.AggregateID, &x.EventType,
		&payload, &headers, &expiresAt, &retries, &onExpired); err != nil {
		return x, err
	}
	x.EventID = outbox.EventID(eventID)
	x.Payload = json.RawMessage(payload)
	x.Headers = backend.DecodeHeaders(headers)
	if expiresAt != nil {
		x.ExpiresAt = *expiresAt
	}
	x.Attempt = retries + 1
	if len(onExpired) > 0 && string(onExpired) != "null" {
		x.OnExpired = onExpired
	}
	return x, nil
}

// expirePage ends one page of waiting events past their deadline and
// enqueues their compensating events, in one transaction.
func (s *Store) expirePage(ctx context.Context, req store.SweepRequest) (int64, error) {
	var n int64
	err := retrySerialization(ctx, func() error {
		n = 0
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, s.q.expire, req.Limit, textlimit.StorableText(req.RelayID, textlimit.MaxRelayIDRunes))
			if err != nil {
				return err
			}
			var xs []compensation.Expired
			for rows.Next() {
				x, err := scanExpiredRow(rows)
				if err != nil {
					rows.Close()
					return err
				}
				n++
				if x.OnExpired != nil {
					xs = append(xs, x)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			return s.compensate(ctx, tx, xs, req.RelayID)
		})
	})
	return n, err
}

// compensate enqueues, in tx (the transaction that moved xs to EXPIRED),
// the compensating event of each of xs, through the statement Enqueue
// uses (the per-aggregate lock included), and links each pair with a
// COMPENSATED audit row on the expired event. A compensating event that
// already exists (the event was requeued and expired again) is not
// enqueued twice.
func (s *Store) compensate(ctx context.Context, tx pgx.Tx, xs []compensation.Expired, relayID string) error {
	if len(xs) == 0 {
		return nil
	}
	events, err := compensation.Events(s.cfg.Limits, xs)
	if err != nil {
		return err
	}
	ids := make([]string, len(events))
	for i := range events {
		ids[i] = events[i].ID.String()
	}
	rows, err := tx.Query(ctx, s.q.existingEvents, ids)
	if err != nil {
		return err
	}
	exists := map[outbox.EventID]bool{}
	for rows.Next() {
		var id [16]byte
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		exists[outbox.EventID(id)] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var (
		fresh                    []outbox.Event
		expiredIDs, tokens, note []string
		outboxIDs                []int64
		attempts                 []int32
	)
	for i := range events {
		if exists[events[i].ID] {
			continue
		}
		fresh = append(fresh, events[i])
		expiredIDs = append(expiredIDs, xs[i].EventID.String())
		tokens = append(tokens, events[i].ID.String())
		note = append(note, compensation.Note(events[i]))
		outboxIDs = append(outboxIDs, xs[i].ID)
		attempts = append(attempts, int32(xs[i].Attempt))
	}
	if len(fresh) == 0 {
		return nil
	}
	if err := s.writeChunks(fresh, func(query string, args []any) error {
		_, err := tx.Exec(ctx, query, args...)
		return err
	}); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, s.q.compensatedAttempts, expiredIDs, tokens, outboxIDs, attempts, note, relayID)
	return err
}
