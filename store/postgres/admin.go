package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/filter"
	"github.com/txoutbox/outbox/store/internal/pages"
	"github.com/txoutbox/outbox/store/internal/sqladmin"
)

// Stats implements store.Store.
func (s *Store) Stats(ctx context.Context, failedBlocks bool) (store.Stats, error) {
	st := backend.NewStats()
	rows, err := s.pool.Query(ctx, s.q.stats)
	if err != nil {
		return st, s.wrap("stats", err)
	}
	err = backend.ScanStatusCounts(rows, st.Counts)
	rows.Close()
	if err != nil {
		return st, s.wrap("stats", err)
	}
	var age float64
	if err := s.pool.QueryRow(ctx, s.q.oldestPending).Scan(&age); err != nil {
		return st, s.wrap("stats: oldest pending", err)
	}
	st.OldestPendingAge = time.Duration(age * float64(time.Second))
	if err := s.pool.QueryRow(ctx, s.q.deadLetterCount).Scan(&st.DeadLetters); err != nil {
		return st, s.wrap("stats: dead letters", err)
	}
	if failedBlocks {
		rows, err := s.pool.Query(ctx, s.q.blockedAg)
		if err != nil {
			return st, s.wrap("stats: blocked aggregates", err)
		}
		defer rows.Close()
		for rows.Next() {
			var b store.BlockedAggregate
			var id [16]byte
			if err := rows.Scan(&b.AggregateType, &b.AggregateID, &id, &b.Waiting, &st.BlockedAggregateCount); err != nil {
				return st, s.wrap("stats: blocked aggregates", err)
			}
			b.FailedEventID = outbox.EventID(id)
			st.BlockedAggregates = append(st.BlockedAggregates, b)
		}
		if err := rows.Err(); err != nil {
			return st, s.wrap("stats: blocked aggregates", err)
		}
	}
	return st, nil
}

// listWhere writes f's conditions on the outbox row o, with the status a
// claim gives the row, and returns them with their arguments. The rare
// statuses read the indexes of their rows: FAILED and BLOCKED have hold 2,
// EXPIRED and SKIPPED rows have a last_error.
func listWhere(f store.ListFilter) (string, []any) {
	status := f.Status
	f.Status = ""
	where, args := filter.List(f, placeholder)
	var cond string
	switch status {
	case "":
		return where, args
	case outbox.StatusPending:
		cond = "o.status = 'PENDING' AND c.token IS NULL"
	case outbox.StatusProcessing:
		cond = "(c.token IS NOT NULL OR o.status = 'PROCESSING')"
	case outbox.StatusFailed, outbox.StatusBlocked:
		cond = "o.hold = 2 AND o.status = '" + string(status) + "'"
	case outbox.StatusExpired, outbox.StatusSkipped:
		cond = "o.last_error IS NOT NULL AND o.status = '" + string(status) + "'"
	default:
		cond = "o.status = '" + string(status) + "'"
	}
	if where == "" {
		return " WHERE " + cond, args
	}
	return where + " AND " + cond, args
}

func scanRecord(row pgx.Row) (store.Record, error) {
	var (
		r                                   store.Record
		eventID                             [16]byte
		payload, headers                    []byte
		status                              string
		processedAt, expiresAt, lockedUntil *time.Time
		lockToken                           *[16]byte
		lastError                           *string
	)
	if err := row.Scan(&r.ID, &eventID, &r.AggregateType, &r.AggregateID, &r.EventType, &payload, &headers,
		&status, &r.RetryCount, &r.CreatedAt, &processedAt, &r.AvailableAt, &expiresAt, &lockedUntil,
		&lockToken, &lastError); err != nil {
		return r, err
	}
	r.EventID = outbox.EventID(eventID)
	r.Payload = payload
	r.Headers = backend.DecodeHeaders(headers)
	r.Status = outbox.Status(status)
	if processedAt != nil {
		r.ProcessedAt = *processedAt
	}
	if expiresAt != nil {
		r.ExpiresAt = *expiresAt
	}
	if lockedUntil != nil {
		r.LockedUntil = *lockedUntil
	}
	if lockToken != nil {
		r.LockToken = uuid.UUID(*lockToken).String()
	}
	if lastError != nil {
		r.LastError = *lastError
	}
	return r, nil
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, f store.ListFilter) ([]store.Record, error) {
	f = f.Normalize()
	if _, err := outbox.ParseStatus(string(f.Status)); f.Status != "" && err != nil {
		return nil, err
	}
	where, args := listWhere(f)
	args = append(args, f.Limit)
	q := s.q.listEvents + where + " ORDER BY o.id DESC LIMIT " + placeholder(len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.wrap("list events", err)
	}
	defer rows.Close()
	var out []store.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, s.wrap("list events", err)
		}
		out = append(out, r)
	}
	return out, s.wrap("list events", rows.Err())
}

// GetEvent implements store.Store.
func (s *Store) GetEvent(ctx context.Context, id outbox.EventID) (store.Record, error) {
	r, err := scanRecord(s.pool.QueryRow(ctx, s.q.getEvent, id.String()))
	if errors.Is(err, pgx.ErrNoRows) {
		return s.eventFromHistory(ctx, id)
	}
	return r, s.wrap("get event", err)
}

// Attempts implements store.Store.
func (s *Store) Attempts(ctx context.Context, id outbox.EventID) ([]store.Attempt, error) {
	out, err := s.scanAttempts(ctx, s.q.attempts, id)
	if err != nil || len(out) > 0 {
		return out, err
	}
	return s.attemptsFromHistory(ctx, id)
}

// scanAttempts runs an attempts query of event id.
func (s *Store) scanAttempts(ctx context.Context, query string, id outbox.EventID) ([]store.Attempt, error) {
	rows, err := s.pool.Query(ctx, query, id.String())
	if err != nil {
		return nil, s.wrap("attempts", err)
	}
	defer rows.Close()
	var out []store.Attempt
	for rows.Next() {
		var a store.Attempt
		var token [16]byte
		var outcome string
		var receipt *string
		if err := rows.Scan(&a.Attempt, &a.RelayID, &token, &a.StartedAt, &a.FinishedAt, &outcome, &a.Error, &a.TraceID, &receipt); err != nil {
			return nil, s.wrap("attempts", err)
		}
		if receipt != nil {
			a.Receipt = json.RawMessage(*receipt)
		}
		a.ClaimToken = uuid.UUID(token).String()
		a.Outcome = store.OutcomeKind(outcome)
		out = append(out, a)
	}
	return out, s.wrap("attempts", rows.Err())
}

// DeadLetters implements store.Store.
func (s *Store) DeadLetters(ctx context.Context, limit int) ([]store.DeadLetter, error) {
	rows, err := s.pool.Query(ctx, s.q.deadLetters, backend.DeadLetterLimit(limit))
	if err != nil {
		return nil, s.wrap("dead letters", err)
	}
	defer rows.Close()
	var out []store.DeadLetter
	for rows.Next() {
		var d store.DeadLetter
		var id [16]byte
		var requeued *time.Time
		if err := rows.Scan(&d.ID, &d.OutboxID, &id, &d.AggregateType, &d.AggregateID, &d.EventType,
			&d.RetryCount, &d.Reason, &d.FailedAt, &requeued); err != nil {
			return nil, s.wrap("dead letters", err)
		}
		d.EventID = outbox.EventID(id)
		if requeued != nil {
			d.RequeuedAt = *requeued
		}
		out = append(out, d)
	}
	return out, s.wrap("dead letters", rows.Err())
}

// operatorChange runs one audited operator action in a transaction.
func (s *Store) operatorChange(ctx context.Context, a store.OperatorAction, c store.OperatorChange) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.wrap(c.Verb(), err)
	}
	defer tx.Rollback(ctx)
	if err := s.operatorChangeTx(ctx, tx, a, c); err != nil {
		return err
	}
	return s.wrap("operator action: commit", tx.Commit(ctx))
}

// operatorChangeTx runs one audited operator action in transaction tx.
func (s *Store) operatorChangeTx(ctx context.Context, tx pgx.Tx, a store.OperatorAction, c store.OperatorChange) error {
	var (
		id, status string
		rowID      int64
		retries    int
		aggType    string
		aggID      string
	)
	err := tx.QueryRow(ctx, s.q.operatorLock, a.EventID.String()).Scan(&rowID, &status, &retries, &aggType, &aggID, &id)
	if errors.Is(err, pgx.ErrNoRows) {
		return backend.EventNotFound(a.EventID)
	}
	if err != nil {
		return s.wrap("operator action", err)
	}
	if err := c.Check(a, status); err != nil {
		return err
	}
	// A delivery recorded on the row moves to the attempts table before
	// the row can be delivered again.
	if _, err := tx.Exec(ctx, s.q.moveDelivery, rowID); err != nil {
		return s.wrap("operator action: audit", err)
	}
	if c.Kind == store.Replayed {
		// A delivery recorded per batch (migration 10) is found by the
		// row's processed_at, which the replay clears: it moves to the
		// attempts table, and the delivery counts as an attempt, so the
		// next one is numbered after it.
		if _, err := tx.Exec(ctx, s.q.moveBatchDelivery, rowID); err != nil {
			return s.wrap("operator action: audit", err)
		}
		if _, err := tx.Exec(ctx, s.q.countAttempt, rowID); err != nil {
			return s.wrap("operator action", err)
		}
		retries++
	}
	switch c.To {
	case outbox.StatusPending:
		// A requeued event gets a fresh chance now. An EXPIRED event's
		// deadline has passed, so the requeue removes it (or sets a new one).
		var ttl any
		if a.NewTTL > 0 {
			ttl = a.NewTTL.Microseconds()
		}
		_, err = tx.Exec(ctx, s.q.operatorRequeue, rowID, ttl)
		if err == nil {
			_, err = tx.Exec(ctx, s.q.operatorRequeueDead, rowID)
		}
	default:
		_, err = tx.Exec(ctx, s.q.operatorSetStatus, rowID, string(c.To))
	}
	if err != nil {
		return s.wrap("operator action", err)
	}
	relay, reason := backend.OperatorAudit(c, a, status)
	if _, err := tx.Exec(ctx, s.q.operatorAudit,
		id, string(c.Kind), rowID, retries, relay, reason); err != nil {
		return s.wrap("operator action: audit", err)
	}
	// Release the events this one held back, unless another FAILED event
	// of the aggregate still holds them.
	if _, err := tx.Exec(ctx, s.q.operatorUnblock,
		aggType, aggID); err != nil {
		return s.wrap("operator action: unblock", err)
	}
	return nil
}

// Requeue implements store.Store.
func (s *Store) Requeue(ctx context.Context, a store.OperatorAction) error {
	return s.operatorChange(ctx, a, store.RequeueChange)
}

// Skip implements store.Store.
func (s *Store) Skip(ctx context.Context, a store.OperatorAction) error {
	return s.operatorChange(ctx, a, store.SkipChange)
}

// Purge implements store.Store. It walks the table in id order and stops at
// the first page whose rows are all younger than the retention, so a purge
// with nothing to do reads one page.
func (s *Store) Purge(ctx context.Context, req store.PurgeRequest) (int64, error) {
	req, err := req.Normalize()
	if err != nil {
		return 0, err
	}
	names := store.StatusNames(req.Statuses)
	keepBefore, err := s.purgeKeepsBefore(ctx, req)
	if err != nil {
		return 0, err
	}
	total, err := pages.Purge(func(after int64) (p pages.PurgePage, err error) {
		err = s.pool.QueryRow(ctx, s.q.purge, after, req.BatchSize, names, req.OlderThan.Microseconds(), keepBefore).Scan(&p.Deleted, &p.Last, &p.Old)
		return p, err
	})
	if err != nil {
		return total, s.wrap("purge", err)
	}
	// The deliveries' audit rows go with the events they record: both are
	// past the retention together (a delivery's completed_at is its
	// events' processed_at).
	if slices.Contains(names, string(outbox.StatusProcessed)) {
		for {
			tag, err := s.pool.Exec(ctx, s.q.purgeDeliveries, req.OlderThan.Microseconds(), req.BatchSize)
			if err != nil {
				return total, s.wrap("purge deliveries", err)
			}
			if tag.RowsAffected() < int64(req.BatchSize) {
				break
			}
		}
	}
	return total, nil
}

// requeueFilterSQL writes store.RequeueFilter for PostgreSQL.
var requeueFilterSQL = filter.SQL{
	Mark: func(n int) string { return "$" + strconv.Itoa(n) },
	Like: func(col, ph string) string { return col + ` ILIKE ` + ph + ` ESCAPE '\'` },
}

// CountMatching implements store.Store.
func (s *Store) CountMatching(ctx context.Context, f store.RequeueFilter) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	where, args := filter.Requeue(f, requeueFilterSQL, 0)
	var n int64
	err := s.pool.QueryRow(ctx, s.q.countMatching+where, args...).Scan(&n)
	return n, s.wrap("count matching events", err)
}

// RequeueMatching implements store.Store.
func (s *Store) RequeueMatching(ctx context.Context, f store.RequeueFilter, a store.OperatorAction) (int64, error) {
	return pages.Requeue(ctx, f, a, func(after int64, limit int) ([]store.MatchedEvent, error) {
		where, args := filter.Requeue(f, requeueFilterSQL, after)
		rows, err := s.pool.Query(ctx, s.q.selectMatching+where+
			` ORDER BY id LIMIT `+strconv.Itoa(limit), args...)
		if err != nil {
			return nil, s.wrap("requeue matching", err)
		}
		defer rows.Close()
		var out []store.MatchedEvent
		for rows.Next() {
			var m store.MatchedEvent
			var id [16]byte
			if err := rows.Scan(&m.ID, &id); err != nil {
				return nil, s.wrap("requeue matching", err)
			}
			m.EventID = outbox.EventID(id)
			out = append(out, m)
		}
		return out, s.wrap("requeue matching", rows.Err())
	}, s.Requeue)
}

// AdminQueries implements store.Store over a database/sql handle on
// the store's pool, which opens no connections of its own; Close the
// queries when done (it leaves the pool open).
func (s *Store) AdminQueries() store.AdminQueries {
	return sqladmin.NewOwned(stdlib.OpenDBFromPool(s.pool), sqlDialect, sqladmin.Schema{
		// Migration 10.
		Claimed:    statements.MustRenderNamed("admin.claimed", s.t),
		Held:       statements.MustRenderNamed("admin.held", s.t),
		Deliveries: s.t.Outbox + "_deliveries",
	}, s.t)
}
