package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// Stats implements store.Store.
func (s *Store) Stats(ctx context.Context, failedBlocks bool) (store.Stats, error) {
	st := store.Stats{Counts: make(map[outbox.Status]int64, len(outbox.Statuses))}
	for _, status := range outbox.Statuses {
		st.Counts[status] = 0
	}
	rows, err := s.db.QueryContext(ctx, s.q.stats)
	if err != nil {
		return st, s.wrap("stats", err)
	}
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			rows.Close()
			return st, s.wrap("stats", err)
		}
		st.Counts[outbox.Status(status)] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, s.wrap("stats", err)
	}
	var age sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.q.oldestPending).Scan(&age); err != nil {
		return st, s.wrap("stats: oldest pending", err)
	}
	st.OldestPendingAge = max(time.Duration(age.Int64)*time.Microsecond, 0)
	if err := s.db.QueryRowContext(ctx, s.q.deadLetterCount).Scan(&st.DeadLetters); err != nil {
		return st, s.wrap("stats: dead letters", err)
	}
	if !failedBlocks {
		return st, nil
	}
	rows, err = s.db.QueryContext(ctx, s.q.blockedAg)
	if err != nil {
		return st, s.wrap("stats: blocked aggregates", err)
	}
	defer rows.Close()
	for rows.Next() {
		var b store.BlockedAggregate
		if err := rows.Scan(&b.AggregateType, &b.AggregateID, &b.FailedEventID, &b.Waiting, &st.BlockedAggregateCount); err != nil {
			return st, s.wrap("stats: blocked aggregates", err)
		}
		st.BlockedAggregates = append(st.BlockedAggregates, b)
	}
	return st, s.wrap("stats: blocked aggregates", rows.Err())
}

type scanner interface{ Scan(dest ...any) error }

func scanRecord(row scanner) (store.Record, error) {
	var (
		r                                   store.Record
		payload, headers                    []byte
		status                              string
		created, available                  nullTime
		processedAt, expiresAt, lockedUntil nullTime
		lockToken, lastError                sql.NullString
	)
	if err := row.Scan(&r.ID, &r.EventID, &r.AggregateType, &r.AggregateID, &r.EventType, &payload, &headers,
		&status, &r.RetryCount, &created, &processedAt, &available, &expiresAt, &lockedUntil,
		&lockToken, &lastError); err != nil {
		return r, err
	}
	r.Payload = json.RawMessage(payload)
	r.Headers = decodeHeaders(headers)
	r.Status = outbox.Status(status)
	r.CreatedAt, r.AvailableAt = created.Time, available.Time
	r.ProcessedAt, r.ExpiresAt, r.LockedUntil = processedAt.Time, expiresAt.Time, lockedUntil.Time
	r.LockToken = lockToken.String
	r.LastError = lastError.String
	return r, nil
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, f store.ListFilter) ([]store.Record, error) {
	f = f.Normalize()
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, cond)
	}
	if f.Status != "" {
		add("status = ?", string(f.Status))
	}
	if f.AggregateType != "" {
		add("aggregate_type = ?", f.AggregateType)
	}
	if f.AggregateID != "" {
		add("aggregate_id = ?", f.AggregateID)
	}
	if f.BeforeID > 0 {
		add("id < ?", f.BeforeID)
	}
	q := "SELECT " + recordColumns + " FROM `" + s.t.Outbox + "`"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, f.Limit)
	q += " ORDER BY id DESC LIMIT ?"
	rows, err := s.db.QueryContext(ctx, q, args...)
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
	r, err := scanRecord(s.db.QueryRowContext(ctx, s.q.getRecord, id.String()))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("%w: %s", outbox.ErrNotFound, id)
	}
	return r, s.wrap("get event", err)
}

// Attempts implements store.Store.
func (s *Store) Attempts(ctx context.Context, id outbox.EventID) ([]store.Attempt, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT attempt, relay_id, claim_token, started_at, finished_at, outcome, COALESCE(`error`, '') "+
		"FROM `"+s.t.Attempts+"` WHERE event_id = ? ORDER BY finished_at, started_at, attempt", id.String())
	if err != nil {
		return nil, s.wrap("attempts", err)
	}
	defer rows.Close()
	var out []store.Attempt
	for rows.Next() {
		var (
			a                 store.Attempt
			outcome           string
			started, finished nullTime
		)
		if err := rows.Scan(&a.Attempt, &a.RelayID, &a.ClaimToken, &started, &finished, &outcome, &a.Error); err != nil {
			return nil, s.wrap("attempts", err)
		}
		a.StartedAt, a.FinishedAt = started.Time, finished.Time
		a.Outcome = store.OutcomeKind(outcome)
		out = append(out, a)
	}
	return out, s.wrap("attempts", rows.Err())
}

// DeadLetters implements store.Store.
func (s *Store) DeadLetters(ctx context.Context, limit int) ([]store.DeadLetter, error) {
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	rows, err := s.db.QueryContext(ctx, "SELECT id, outbox_id, event_id, aggregate_type, aggregate_id, event_type, retry_count, "+
		"reason, failed_at, requeued_at FROM `"+s.t.DeadLetters+"` ORDER BY id DESC LIMIT ?", limit)
	if err != nil {
		return nil, s.wrap("dead letters", err)
	}
	defer rows.Close()
	var out []store.DeadLetter
	for rows.Next() {
		var (
			d                  store.DeadLetter
			failed, requeuedAt nullTime
		)
		if err := rows.Scan(&d.ID, &d.OutboxID, &d.EventID, &d.AggregateType, &d.AggregateID, &d.EventType,
			&d.RetryCount, &d.Reason, &failed, &requeuedAt); err != nil {
			return nil, s.wrap("dead letters", err)
		}
		d.FailedAt, d.RequeuedAt = failed.Time, requeuedAt.Time
		out = append(out, d)
	}
	return out, s.wrap("dead letters", rows.Err())
}

// errAction carries an operator error that must reach the caller as it is
// (ErrNotFound, ErrConflict).
type errAction struct{ err error }

func (e errAction) Error() string { return e.err.Error() }

// operatorChange runs one audited operator action in one transaction.
func (s *Store) operatorChange(ctx context.Context, a store.OperatorAction, kind store.OutcomeKind,
	from []outbox.Status, to outbox.Status) error {
	actor := a.Actor
	if actor == "" {
		actor = "operator"
	}
	t := "`" + s.t.Outbox + "`"
	err := s.inTx(ctx, "operator "+strings.ToLower(string(kind)), func(tx *sql.Tx) error {
		var (
			status         string
			rowID          int64
			retries        int
			aggType, aggID string
			now            nullTime
		)
		err := tx.QueryRowContext(ctx, "SELECT id, status, retry_count, aggregate_type, aggregate_id, UTC_TIMESTAMP(6) FROM "+t+
			" WHERE event_id = ? FOR UPDATE", a.EventID.String()).Scan(&rowID, &status, &retries, &aggType, &aggID, &now)
		if errors.Is(err, sql.ErrNoRows) {
			return errAction{fmt.Errorf("%w: %s", outbox.ErrNotFound, a.EventID)}
		}
		if err != nil {
			return err
		}
		if !slices.Contains(from, outbox.Status(status)) {
			return errAction{fmt.Errorf("%w: event %s is %s; %s applies to %s events", outbox.ErrConflict, a.EventID, status,
				strings.ToLower(string(kind)), joinStatuses(from))}
		}
		nowText := formatTime(now.Time)
		switch to {
		case outbox.StatusPending:
			// A requeued event gets a fresh chance now. An EXPIRED event's
			// deadline has passed, so the requeue removes it (or sets a new one).
			var ttl any
			if a.NewTTL > 0 {
				ttl = micros(a.NewTTL)
			}
			_, err = tx.ExecContext(ctx, "UPDATE "+t+" SET status = 'PENDING', available_at = CAST(? AS DATETIME(6)), processed_at = NULL, "+
				"locked_until = NULL, lock_token = NULL, "+
				"expires_at = CASE WHEN ? IS NOT NULL THEN CAST(? AS DATETIME(6)) + INTERVAL ? MICROSECOND "+
				"WHEN expires_at <= CAST(? AS DATETIME(6)) THEN NULL ELSE expires_at END "+
				"WHERE id = ?", nowText, ttl, nowText, ttl, nowText, rowID)
			if err == nil {
				_, err = tx.ExecContext(ctx, "UPDATE `"+s.t.DeadLetters+"` SET requeued_at = CAST(? AS DATETIME(6)) "+
					"WHERE outbox_id = ? AND requeued_at IS NULL", nowText, rowID)
			}
		default:
			_, err = tx.ExecContext(ctx, "UPDATE "+t+" SET status = ? WHERE id = ?", string(to), rowID)
		}
		if err != nil {
			return err
		}
		reason := fmt.Sprintf("%s by %s (was %s)", strings.ToLower(string(kind)), actor, status)
		if a.Reason != "" {
			reason += ": " + a.Reason
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO `"+s.t.Attempts+"` ("+attemptColumns+") "+
			"VALUES (?, ?, ?, ?, ?, ?, CAST(? AS DATETIME(6)), CAST(? AS DATETIME(6)), ?)",
			a.EventID.String(), uuid.NewString(), string(kind), rowID, retries, truncateRunes("operator:"+actor, 200),
			nowText, nowText, reason); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		// Release the events this one held back, unless another FAILED
		// event of the aggregate still holds them: those before the
		// aggregate's first FAILED event.
		var firstFailed sql.NullInt64
		if err := tx.QueryRowContext(ctx, "SELECT MIN(id) FROM "+t+" WHERE aggregate_type = ? AND aggregate_id = ? "+
			"AND unfinished = 1 AND status = 'FAILED'", aggType, aggID).Scan(&firstFailed); err != nil {
			return fmt.Errorf("unblock: %w", err)
		}
		// Read without locks (a producer's uncommitted rows are not waited
		// for), then changed by primary key.
		q := "SELECT id FROM " + t + " WHERE aggregate_type = ? AND aggregate_id = ? AND unfinished = 1 AND status = 'BLOCKED'"
		args := []any{aggType, aggID}
		if firstFailed.Valid {
			q += " AND id < ?"
			args = append(args, firstFailed.Int64)
		}
		ids, err := queryIDs(ctx, tx, q, args...)
		if err != nil {
			return fmt.Errorf("unblock: %w", err)
		}
		if len(ids) > 0 {
			if _, err := tx.ExecContext(ctx, "UPDATE "+t+" FORCE INDEX (PRIMARY) SET status = 'PENDING' WHERE id IN ("+
				idList(ids)+") AND status = 'BLOCKED'"); err != nil {
				return fmt.Errorf("unblock: %w", err)
			}
		}
		return nil
	})
	var ae errAction
	if errors.As(err, &ae) {
		return ae.err
	}
	return s.wrap("operator action", err)
}

func joinStatuses(ss []outbox.Status) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, " or ")
}

// Requeue implements store.Store.
func (s *Store) Requeue(ctx context.Context, a store.OperatorAction) error {
	return s.operatorChange(ctx, a, store.Requeued, []outbox.Status{outbox.StatusFailed, outbox.StatusExpired}, outbox.StatusPending)
}

// Skip implements store.Store.
func (s *Store) Skip(ctx context.Context, a store.OperatorAction) error {
	return s.operatorChange(ctx, a, store.Skipped, []outbox.Status{outbox.StatusFailed}, outbox.StatusSkipped)
}

// Purge implements store.Store. It walks the table in id order, a page of
// BatchSize rows at a time: it reads the page without locks, then deletes
// its purgeable rows (and their attempt rows and dead letters) in one short
// transaction that locks them with SKIP LOCKED, so it never waits on a row
// a relay holds. It stops at the first page whose rows are all younger than
// the retention, so a purge with nothing to do reads one page.
func (s *Store) Purge(ctx context.Context, req store.PurgeRequest) (int64, error) {
	statuses := req.Statuses
	if len(statuses) == 0 {
		statuses = []outbox.Status{outbox.StatusProcessed, outbox.StatusExpired}
	}
	var names []string
	for _, st := range statuses {
		if !st.Final() {
			return 0, fmt.Errorf("%w: purge applies to final statuses only, not %s", outbox.ErrInvalidConfig, st)
		}
		names = append(names, "'"+string(st)+"'") // validated constants
	}
	if req.OlderThan < 0 {
		return 0, fmt.Errorf("%w: purge retention must not be negative", outbox.ErrInvalidConfig)
	}
	batch := req.BatchSize
	if batch <= 0 {
		batch = 1000
	}
	in := strings.Join(names, ",")
	t := "`" + s.t.Outbox + "`"
	page := "SELECT id, (status IN (" + in + ") AND processed_at IS NOT NULL AND processed_at <= c.cutoff), " +
		"created_at <= c.cutoff, c.cutoff FROM " + t + " JOIN (SELECT UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AS cutoff) c " +
		"WHERE id > ? ORDER BY id LIMIT ?"
	var total, cursor int64
	for {
		var (
			del       []int64
			last, old int64
			cutoff    nullTime
			deleted   int64
			pageRows  int
		)
		rows, err := s.db.QueryContext(ctx, page, micros(req.OlderThan), cursor, batch)
		if err != nil {
			return total, s.wrap("purge", err)
		}
		for rows.Next() {
			var (
				id         int64
				d, isOld   bool
				pageCutoff nullTime
			)
			if err := rows.Scan(&id, &d, &isOld, &pageCutoff); err != nil {
				rows.Close()
				return total, s.wrap("purge", err)
			}
			pageRows++
			last, cutoff = id, pageCutoff
			if isOld {
				old++
			}
			if d {
				del = append(del, id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return total, s.wrap("purge", err)
		}
		if len(del) > 0 {
			err := s.inTx(ctx, "purge", func(tx *sql.Tx) error {
				deleted = 0
				rows, err := tx.QueryContext(ctx, "SELECT id, event_id FROM "+t+" WHERE id IN ("+idList(del)+") AND status IN ("+in+
					") AND processed_at <= CAST(? AS DATETIME(6)) ORDER BY id FOR UPDATE SKIP LOCKED", formatTime(cutoff.Time))
				if err != nil {
					return err
				}
				var ids []int64
				var eventIDs []any
				var marks []string
				for rows.Next() {
					var id int64
					var eventID string
					if err := rows.Scan(&id, &eventID); err != nil {
						rows.Close()
						return err
					}
					ids = append(ids, id)
					eventIDs = append(eventIDs, eventID)
					marks = append(marks, "?")
				}
				rows.Close()
				if err := rows.Err(); err != nil || len(ids) == 0 {
					return err
				}
				list := idList(ids)
				if _, err := tx.ExecContext(ctx, "DELETE FROM `"+s.t.Attempts+"` WHERE event_id IN ("+strings.Join(marks, ",")+")", eventIDs...); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, "DELETE FROM `"+s.t.DeadLetters+"` WHERE outbox_id IN ("+list+")"); err != nil {
					return err
				}
				res, err := tx.ExecContext(ctx, "DELETE FROM "+t+" WHERE id IN ("+list+")")
				if err != nil {
					return err
				}
				deleted, err = res.RowsAffected()
				return err
			})
			if err != nil {
				return total, s.wrap("purge", err)
			}
		}
		total += deleted
		if pageRows == 0 || old == 0 {
			return total, nil
		}
		cursor = last
	}
}
