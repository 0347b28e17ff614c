package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/filter"
	"github.com/txoutbox/outbox/store/internal/pages"
	"github.com/txoutbox/outbox/store/internal/sqladmin"
)

// Stats implements store.Store. It reads one consistent snapshot.
func (s *Store) Stats(ctx context.Context, failedBlocks bool) (store.Stats, error) {
	var st store.Stats
	err := s.readTx(ctx, func(c *sql.Conn, now string) error {
		st = backend.NewStats()
		rows, err := c.QueryContext(ctx, s.q.stats)
		if err != nil {
			return err
		}
		err = backend.ScanStatusCounts(rows, st.Counts)
		rows.Close()
		if err != nil {
			return err
		}
		var oldest sql.NullString
		if err := c.QueryRowContext(ctx, s.q.oldestPending).Scan(&oldest); err != nil {
			return fmt.Errorf("oldest pending: %w", err)
		}
		if oldest.Valid {
			o, err := parseTime(oldest.String)
			if err != nil {
				return err
			}
			n, err := parseTime(now)
			if err != nil {
				return err
			}
			st.OldestPendingAge = max(n.Sub(o), 0)
		}
		if err := c.QueryRowContext(ctx, s.q.deadLetterCount).Scan(&st.DeadLetters); err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
		if !failedBlocks {
			return nil
		}
		rows, err = c.QueryContext(ctx, s.q.blockedAg)
		if err != nil {
			return fmt.Errorf("blocked aggregates: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var b store.BlockedAggregate
			if err := rows.Scan(&b.AggregateType, &b.AggregateID, &b.FailedEventID, &b.Waiting, &st.BlockedAggregateCount); err != nil {
				return fmt.Errorf("blocked aggregates: %w", err)
			}
			st.BlockedAggregates = append(st.BlockedAggregates, b)
		}
		return rows.Err()
	})
	if err != nil {
		return st, s.wrap("stats", err)
	}
	return st, nil
}

// listWhere writes f's conditions, with the status a claim gives a row.
func listWhere(f store.ListFilter) (string, []any) {
	status := f.Status
	f.Status = ""
	where, args := filter.List(f, nil)
	var cond string
	switch status {
	case "":
		return where, args
	case outbox.StatusPending:
		cond = "o.status = 'PENDING' AND cl.cid IS NULL"
	case outbox.StatusProcessing:
		cond = "(o.status = 'PROCESSING' OR (o.status = 'PENDING' AND cl.cid IS NOT NULL))"
	default:
		cond = "o.status = ?"
		args = append(args, string(status))
	}
	if where == "" {
		return " WHERE " + cond, args
	}
	return where + " AND " + cond, args
}

type scanner interface{ Scan(dest ...any) error }

func scanRecord(row scanner) (store.Record, error) {
	var (
		r                                   store.Record
		payload, headers, status            string
		createdAt, availableAt              string
		processedAt, expiresAt, lockedUntil sql.NullString
		lockToken, lastError                sql.NullString
		retries                             int64
	)
	if err := row.Scan(&r.ID, &r.EventID, &r.AggregateType, &r.AggregateID, &r.EventType, &payload, &headers,
		&status, &retries, &createdAt, &processedAt, &availableAt, &expiresAt, &lockedUntil,
		&lockToken, &lastError); err != nil {
		return r, err
	}
	r.Payload = json.RawMessage(payload)
	r.Headers = backend.DecodeHeaders([]byte(headers))
	r.Status = outbox.Status(status)
	r.RetryCount = int(retries)
	r.LockToken = lockToken.String
	r.LastError = lastError.String
	var err error
	if r.CreatedAt, err = parseTime(createdAt); err != nil {
		return r, err
	}
	if r.AvailableAt, err = parseTime(availableAt); err != nil {
		return r, err
	}
	if r.ProcessedAt, err = parseNullTime(processedAt); err != nil {
		return r, err
	}
	if r.ExpiresAt, err = parseNullTime(expiresAt); err != nil {
		return r, err
	}
	if r.LockedUntil, err = parseNullTime(lockedUntil); err != nil {
		return r, err
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
	q := s.q.listEvents + where + " ORDER BY o.id DESC LIMIT ?"
	var out []store.Record
	err := retryBusy(ctx, func() error {
		out = nil
		rows, err := s.db.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanRecord(rows)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, s.wrap("list events", err)
	}
	return out, nil
}

// GetEvent implements store.Store.
func (s *Store) GetEvent(ctx context.Context, id outbox.EventID) (store.Record, error) {
	var r store.Record
	err := retryBusy(ctx, func() error {
		var err error
		r, err = scanRecord(s.db.QueryRowContext(ctx, s.q.getEvent, id.String()))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
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
	var out []store.Attempt
	err := retryBusy(ctx, func() error {
		out = nil
		rows, err := s.db.QueryContext(ctx, query, id.String())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				a                 store.Attempt
				attempt           int64
				outcome           string
				started, finished string
				receipt           sql.NullString
			)
			if err := rows.Scan(&attempt, &a.RelayID, &a.ClaimToken, &started, &finished, &outcome, &a.Error, &a.TraceID, &receipt); err != nil {
				return err
			}
			if receipt.Valid {
				a.Receipt = json.RawMessage(receipt.String)
			}
			a.Attempt = int(attempt)
			a.Outcome = store.OutcomeKind(outcome)
			if a.StartedAt, err = parseTime(started); err != nil {
				return err
			}
			if a.FinishedAt, err = parseTime(finished); err != nil {
				return err
			}
			out = append(out, a)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, s.wrap("attempts", err)
	}
	return out, nil
}

// DeadLetters implements store.Store.
func (s *Store) DeadLetters(ctx context.Context, limit int) ([]store.DeadLetter, error) {
	limit = backend.DeadLetterLimit(limit)
	var out []store.DeadLetter
	err := retryBusy(ctx, func() error {
		out = nil
		rows, err := s.db.QueryContext(ctx, s.q.deadLetters, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				d        store.DeadLetter
				retries  int64
				failedAt string
				requeued sql.NullString
			)
			if err := rows.Scan(&d.ID, &d.OutboxID, &d.EventID, &d.AggregateType, &d.AggregateID, &d.EventType,
				&retries, &d.Reason, &failedAt, &requeued); err != nil {
				return err
			}
			d.RetryCount = int(retries)
			if d.FailedAt, err = parseTime(failedAt); err != nil {
				return err
			}
			if d.RequeuedAt, err = parseNullTime(requeued); err != nil {
				return err
			}
			out = append(out, d)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, s.wrap("dead letters", err)
	}
	return out, nil
}

// errAction carries an operator error that must reach the caller unwrapped
// by the "operator action" prefix (ErrNotFound, ErrConflict).
type errAction struct{ err error }

func (e errAction) Error() string { return e.err.Error() }

// operatorChange runs one audited operator action in one write transaction.
func (s *Store) operatorChange(ctx context.Context, a store.OperatorAction, ch store.OperatorChange) error {
	err := s.writeTx(ctx, func(c *sql.Conn, now string) error {
		return s.operatorChangeTx(ctx, c, now, a, ch)
	})
	var ae errAction
	if errors.As(err, &ae) {
		return ae.err
	}
	return s.wrap("operator action", err)
}

// operatorChangeTx runs one audited operator action in the write
// transaction of c; an error the caller must see as it is comes as an
// errAction.
func (s *Store) operatorChangeTx(ctx context.Context, c *sql.Conn, now string, a store.OperatorAction, ch store.OperatorChange) error {
	var (
		status, eventID string
		rowID, retries  int64
		aggType, aggID  string
	)
	err := c.QueryRowContext(ctx, s.q.operatorLock, a.EventID.String()).Scan(&rowID, &status, &retries, &aggType, &aggID, &eventID)
	if errors.Is(err, sql.ErrNoRows) {
		return errAction{backend.EventNotFound(a.EventID)}
	}
	if err != nil {
		return err
	}
	if err := ch.Check(a, status); err != nil {
		return errAction{err}
	}
	// A delivery recorded on the row moves to the attempts table
	// before the row can be delivered again.
	if _, err := c.ExecContext(ctx, s.q.moveDelivery, rowID); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if _, err := c.ExecContext(ctx, s.q.clearDelivery, rowID); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if ch.Kind == store.Replayed {
		// The delivery counts as an attempt: the next one is
		// numbered after it.
		if _, err := c.ExecContext(ctx, s.q.countAttempt, rowID); err != nil {
			return err
		}
		retries++
	}
	switch ch.To {
	case outbox.StatusPending:
		// A requeued event gets a fresh chance now. An EXPIRED event's
		// deadline has passed, so the requeue removes it (or sets a new one).
		var ttl any
		if a.NewTTL > 0 {
			ttl = modifier(a.NewTTL)
		}
		_, err = c.ExecContext(ctx, s.q.operatorRequeue, rowID, now, ttl)
		if err == nil {
			_, err = c.ExecContext(ctx, s.q.operatorRequeueDead, now, rowID)
		}
	default:
		_, err = c.ExecContext(ctx, s.q.operatorSetStatus, string(ch.To), rowID)
	}
	if err != nil {
		return err
	}
	relay, reason := backend.OperatorAudit(ch, a, status)
	if _, err := c.ExecContext(ctx, s.q.audit, eventID, uuid.NewString(), string(ch.Kind), rowID, retries,
		relay, now, reason); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	// Release the events this one held back, unless another FAILED event
	// of the aggregate still holds them.
	if _, err := c.ExecContext(ctx, s.q.operatorUnblock,
		aggType, aggID); err != nil {
		return fmt.Errorf("unblock: %w", err)
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

// Purge implements store.Store. It walks the table in id order, one short
// write transaction per batch, and stops at the first page whose rows are
// all younger than the retention, so a purge with nothing to do reads one
// page. Timestamps have millisecond precision, so a row counts as older
// than the retention when its time is at or before now - OlderThan (with
// OlderThan 0, a row finished in the current millisecond is purged too).
func (s *Store) Purge(ctx context.Context, req store.PurgeRequest) (int64, error) {
	req, err := req.Normalize()
	if err != nil {
		return 0, err
	}
	names := store.StatusNames(req.Statuses)
	namesJSON, err := json.Marshal(names)
	if err != nil {
		return 0, fmt.Errorf("purge: %w", err)
	}
	page, delAttempts, delDead, delEvents, cutoffSQL := s.q.purgePage, s.q.purgeAttempts, s.q.purgeDeadLetters, s.q.purgeEvents, s.q.purgeCutoff

	total, err := pages.Purge(func(after int64) (p pages.PurgePage, err error) {
		err = s.writeTx(ctx, func(c *sql.Conn, now string) error {
			p = pages.PurgePage{}
			var cutoff string
			if err := c.QueryRowContext(ctx, cutoffSQL, now, modifier(-req.OlderThan)).Scan(&cutoff); err != nil {
				return err
			}
			rows, err := c.QueryContext(ctx, page, after, req.BatchSize, cutoff, string(namesJSON))
			if err != nil {
				return err
			}
			var ids []int64
			var eventIDs []string
			for rows.Next() {
				var (
					id         int64
					eventID    string
					del, isOld bool
				)
				if err := rows.Scan(&id, &eventID, &del, &isOld); err != nil {
					rows.Close()
					return err
				}
				p.Last = id
				if isOld {
					p.Old++
				}
				if del {
					ids = append(ids, id)
					eventIDs = append(eventIDs, eventID)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil || len(ids) == 0 {
				return err
			}
			idsJSON, err := json.Marshal(ids)
			if err != nil {
				return err
			}
			eventIDsJSON, err := json.Marshal(eventIDs)
			if err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, delAttempts, string(eventIDsJSON)); err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, delDead, string(idsJSON)); err != nil {
				return err
			}
			p.Deleted, err = execCount(ctx, c, delEvents, string(idsJSON))
			return err
		})
		return p, err
	})
	return total, s.wrap("purge", err)
}

// requeueFilterSQL writes store.RequeueFilter for SQLite, whose LIKE
// already ignores the case of ASCII letters.
var requeueFilterSQL = filter.SQL{
	Like: func(col, ph string) string { return col + ` LIKE ` + ph + ` ESCAPE '\'` },
	Time: func(t time.Time) any { return formatTime(t) },
}

// CountMatching implements store.Store.
func (s *Store) CountMatching(ctx context.Context, f store.RequeueFilter) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	where, args := filter.Requeue(f, requeueFilterSQL, 0)
	var n int64
	err := retryBusy(ctx, func() error {
		return s.db.QueryRowContext(ctx, s.q.countMatching+where, args...).Scan(&n)
	})
	return n, s.wrap("count matching events", err)
}

// RequeueMatching implements store.Store.
func (s *Store) RequeueMatching(ctx context.Context, f store.RequeueFilter, a store.OperatorAction) (int64, error) {
	return pages.Requeue(ctx, f, a, func(after int64, limit int) ([]store.MatchedEvent, error) {
		where, args := filter.Requeue(f, requeueFilterSQL, after)
		var out []store.MatchedEvent
		err := retryBusy(ctx, func() error {
			out = out[:0]
			rows, err := s.db.QueryContext(ctx, s.q.selectMatching+where+
				` ORDER BY id LIMIT `+strconv.Itoa(limit), args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var m store.MatchedEvent
				var id string
				if err := rows.Scan(&m.ID, &id); err != nil {
					return err
				}
				if m.EventID, err = outbox.ParseEventID(id); err != nil {
					return err
				}
				out = append(out, m)
			}
			return rows.Err()
		})
		return out, s.wrap("requeue matching", err)
	}, s.Requeue)
}

const sqliteNow = "strftime('%Y-%m-%d %H:%M:%f', 'now')"

// AdminQueries implements store.Store.
func (s *Store) AdminQueries() store.AdminQueries {
	return sqladmin.New(s.db, sqlDialect, sqladmin.Schema{
		// A delivery is recorded on the event row (migration 00006).
		DeliveredOnRow: true,
		// Migration 00007.
		Claimed: statements.MustRenderNamed("admin.claimed", s.t),
	}, s.t)
}
