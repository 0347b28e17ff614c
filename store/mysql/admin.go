package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/runes"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/filter"
	"github.com/txoutbox/outbox/store/internal/pages"
	"github.com/txoutbox/outbox/store/internal/sqladmin"
)

// Stats implements store.Store. It reads one consistent snapshot (a
// REPEATABLE READ read-only transaction); a PENDING row that a claim holds
// counts as PROCESSING.
func (s *Store) Stats(ctx context.Context, failedBlocks bool) (store.Stats, error) {
	st := backend.NewStats()
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return st, s.wrap("stats", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, s.q.stats)
	if err != nil {
		return st, s.wrap("stats", err)
	}
	err = backend.ScanStatusCounts(rows, st.Counts)
	rows.Close()
	if err != nil {
		return st, s.wrap("stats", err)
	}
	var busy int64
	if err := tx.QueryRowContext(ctx, s.q.busyPending).Scan(&busy); err != nil {
		return st, s.wrap("stats: claimed events", err)
	}
	st.Counts[outbox.StatusPending] -= busy
	st.Counts[outbox.StatusProcessing] += busy
	var age sql.NullInt64
	if err := tx.QueryRowContext(ctx, s.q.oldestPending).Scan(&age); err != nil {
		return st, s.wrap("stats: oldest pending", err)
	}
	st.OldestPendingAge = max(time.Duration(age.Int64)*time.Microsecond, 0)
	if err := tx.QueryRowContext(ctx, s.q.deadLetterCount).Scan(&st.DeadLetters); err != nil {
		return st, s.wrap("stats: dead letters", err)
	}
	if failedBlocks {
		rows, err = tx.QueryContext(ctx, s.q.blockedAg)
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
		if err := rows.Err(); err != nil {
			return st, s.wrap("stats: blocked aggregates", err)
		}
	}
	return st, s.wrap("stats", tx.Commit())
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
	r.Headers = backend.DecodeHeaders(headers)
	r.Status = outbox.Status(status)
	r.CreatedAt, r.AvailableAt = created.Time, available.Time
	r.ProcessedAt, r.ExpiresAt, r.LockedUntil = processedAt.Time, expiresAt.Time, lockedUntil.Time
	r.LockToken = lockToken.String
	r.LastError = lastError.String
	return r, nil
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

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, f store.ListFilter) ([]store.Record, error) {
	f = f.Normalize()
	if _, err := outbox.ParseStatus(string(f.Status)); f.Status != "" && err != nil {
		return nil, err
	}
	where, args := listWhere(f)
	args = append(args, f.Limit)
	q := s.q.listEvents + where + " ORDER BY o.id DESC LIMIT ?"
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

// scanAttempts runs an attempts query of event id (bound twice).
func (s *Store) scanAttempts(ctx context.Context, query string, id outbox.EventID) ([]store.Attempt, error) {
	rows, err := s.db.QueryContext(ctx, query, id.String(), id.String())
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
			receipt           sql.NullString
		)
		if err := rows.Scan(&a.Attempt, &a.RelayID, &a.ClaimToken, &started, &finished, &outcome, &a.Error, &a.TraceID, &receipt); err != nil {
			return nil, s.wrap("attempts", err)
		}
		if receipt.Valid {
			a.Receipt = json.RawMessage(receipt.String)
		}
		a.StartedAt, a.FinishedAt = started.Time, finished.Time
		a.Outcome = store.OutcomeKind(outcome)
		out = append(out, a)
	}
	return out, s.wrap("attempts", rows.Err())
}

// DeadLetters implements store.Store.
func (s *Store) DeadLetters(ctx context.Context, limit int) ([]store.DeadLetter, error) {
	rows, err := s.db.QueryContext(ctx, s.q.deadLetters, backend.DeadLetterLimit(limit))
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
func (s *Store) operatorChange(ctx context.Context, a store.OperatorAction, ch store.OperatorChange) error {
	err := s.inTx(ctx, "operator "+ch.Verb(), func(tx *sql.Tx) error {
		return s.operatorChangeTx(ctx, tx, a, ch)
	})
	var ae errAction
	if errors.As(err, &ae) {
		return ae.err
	}
	return s.wrap("operator action", err)
}

// operatorChangeTx runs one audited operator action in transaction tx; an
// error the caller must see as it is comes as an errAction.
func (s *Store) operatorChangeTx(ctx context.Context, tx *sql.Tx, a store.OperatorAction, ch store.OperatorChange) error {
	var (
		status         string
		rowID          int64
		retries        int
		aggType, aggID string
		now            nullTime
	)
	err := tx.QueryRowContext(ctx, s.q.operatorLock, a.EventID.String()).Scan(&rowID, &status, &retries, &aggType, &aggID, &now)
	if errors.Is(err, sql.ErrNoRows) {
		return errAction{backend.EventNotFound(a.EventID)}
	}
	if err != nil {
		return err
	}
	if status == string(outbox.StatusPending) {
		// A PENDING row a claim holds is PROCESSING; the claim's
		// commit, which reads its rows under a share lock, has ended.
		var busy bool
		if err := tx.QueryRowContext(ctx, s.q.rowBusy, rowID).Scan(&busy); err != nil {
			return err
		}
		if busy {
			status = string(outbox.StatusProcessing)
		}
	}
	if err := ch.Check(a, status); err != nil {
		return errAction{err}
	}
	// A delivery recorded on the row moves to the attempts table
	// before the row can be delivered again.
	if _, err := tx.ExecContext(ctx, s.q.moveDelivery, rowID); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.q.clearDelivery, rowID); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if ch.Kind == store.Replayed {
		// The delivery counts as an attempt: the next one is
		// numbered after it.
		if _, err := tx.ExecContext(ctx, s.q.countAttempt, rowID); err != nil {
			return err
		}
		retries++
	}
	nowText := formatTime(now.Time)
	switch ch.To {
	case outbox.StatusPending:
		// A requeued event gets a fresh chance now. An EXPIRED event's
		// deadline has passed, so the requeue removes it (or sets a new one).
		var ttl any
		if a.NewTTL > 0 {
			ttl = micros(a.NewTTL)
		}
		_, err = tx.ExecContext(ctx, s.q.operatorRequeue, nowText, ttl, nowText, ttl, nowText, rowID)
		if err == nil {
			_, err = tx.ExecContext(ctx, s.q.operatorRequeueDead, nowText, rowID)
		}
	default:
		_, err = tx.ExecContext(ctx, s.q.operatorSetStatus, string(ch.To), rowID)
	}
	if err != nil {
		return err
	}
	relay, reason := backend.OperatorAudit(ch, a, status)
	if _, err := tx.ExecContext(ctx, s.q.operatorAudit,
		a.EventID.String(), uuid.NewString(), string(ch.Kind), rowID, retries, runes.Truncate(relay, 200),
		nowText, nowText, reason); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	// Release the events this one held back, unless another FAILED
	// event of the aggregate still holds them: those before the
	// aggregate's first FAILED event.
	var firstFailed sql.NullInt64
	if err := tx.QueryRowContext(ctx, s.q.operatorFirstFailed, aggType, aggID).Scan(&firstFailed); err != nil {
		return fmt.Errorf("unblock: %w", err)
	}
	// Read without locks (a producer's uncommitted rows are not waited
	// for), then changed by primary key.
	q, args := s.q.operatorBlocked, []any{aggType, aggID}
	if firstFailed.Valid {
		q, args = s.q.operatorBlockedBefore, append(args, firstFailed.Int64)
	}
	ids, err := queryIDs(ctx, tx, q, args...)
	if err != nil {
		return fmt.Errorf("unblock: %w", err)
	}
	if len(ids) > 0 {
		unblock, err := s.q.byIDs("admin.operator_unblock", ids)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, unblock); err != nil {
			return fmt.Errorf("unblock: %w", err)
		}
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

// Purge implements store.Store. It walks the table in id order, a page of
// BatchSize rows at a time: it reads the page without locks, then deletes
// its purgeable rows (and their attempt rows and dead letters) in one short
// transaction that locks them with SKIP LOCKED, so it never waits on a row
// a relay holds. It stops at the first page whose rows are all younger than
// the retention, so a purge with nothing to do reads one page.
func (s *Store) Purge(ctx context.Context, req store.PurgeRequest) (int64, error) {
	req, err := req.Normalize()
	if err != nil {
		return 0, err
	}
	in := "'" + strings.Join(store.StatusNames(req.Statuses), "','") + "'" // validated constants
	keep, err := s.purgeKeepCond(ctx, req)
	if err != nil {
		return 0, err
	}
	page, err := s.q.render("admin.purge_page", fragments{In: in, Cond: keep})
	if err != nil {
		return 0, err
	}
	total, err := pages.Purge(func(after int64) (pages.PurgePage, error) {
		var (
			p      pages.PurgePage
			del    []int64
			cutoff nullTime
		)
		rows, err := s.db.QueryContext(ctx, page, micros(req.OlderThan), after, req.BatchSize)
		if err != nil {
			return p, err
		}
		for rows.Next() {
			var (
				id         int64
				d, isOld   bool
				pageCutoff nullTime
			)
			if err := rows.Scan(&id, &d, &isOld, &pageCutoff); err != nil {
				rows.Close()
				return p, err
			}
			p.Last, cutoff = id, pageCutoff
			if isOld {
				p.Old++
			}
			if d {
				del = append(del, id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(del) == 0 {
			return p, err
		}
		err = s.inTx(ctx, "purge", func(tx *sql.Tx) error {
			p.Deleted = 0
			lock, err := s.q.render("admin.purge_lock", fragments{In: in, IDs: idList(del), Cond: keep})
			if err != nil {
				return err
			}
			rows, err := tx.QueryContext(ctx, lock, formatTime(cutoff.Time))
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
			targets := fragments{IDs: idList(ids), Marks: strings.Join(marks, ",")}
			attempts, err := s.q.render("admin.purge_delete_attempts", targets)
			if err != nil {
				return err
			}
			dead, err := s.q.render("admin.purge_delete_dead", targets)
			if err != nil {
				return err
			}
			rowsDelete, err := s.q.render("admin.purge_delete", targets)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, attempts, eventIDs...); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, dead); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, rowsDelete)
			if err != nil {
				return err
			}
			p.Deleted, err = res.RowsAffected()
			return err
		})
		return p, err
	})
	return total, s.wrap("purge", err)
}

// requeueFilterSQL writes store.RequeueFilter for MySQL and MariaDB: the
// text columns' binary collation makes LIKE case-sensitive, hence LOWER.
var requeueFilterSQL = filter.SQL{
	Like: func(col, ph string) string { return "LOWER(" + col + ") LIKE LOWER(" + ph + ")" },
	Time: func(t time.Time) any { return formatTime(t) },
}

// CountMatching implements store.Store.
func (s *Store) CountMatching(ctx context.Context, f store.RequeueFilter) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	where, args := filter.Requeue(f, requeueFilterSQL, 0)
	var n int64
	err := s.db.QueryRowContext(ctx, s.q.countMatching+where, args...).Scan(&n)
	return n, s.wrap("count matching events", err)
}

// RequeueMatching implements store.Store.
func (s *Store) RequeueMatching(ctx context.Context, f store.RequeueFilter, a store.OperatorAction) (int64, error) {
	return pages.Requeue(ctx, f, a, func(after int64, limit int) ([]store.MatchedEvent, error) {
		where, args := filter.Requeue(f, requeueFilterSQL, after)
		rows, err := s.db.QueryContext(ctx, s.q.selectMatching+where+
			" ORDER BY id LIMIT "+strconv.Itoa(limit), args...)
		if err != nil {
			return nil, s.wrap("requeue matching", err)
		}
		defer rows.Close()
		var out []store.MatchedEvent
		for rows.Next() {
			var m store.MatchedEvent
			var id string
			if err := rows.Scan(&m.ID, &id); err != nil {
				return nil, s.wrap("requeue matching", err)
			}
			if m.EventID, err = outbox.ParseEventID(id); err != nil {
				return nil, s.wrap("requeue matching", err)
			}
			out = append(out, m)
		}
		return out, s.wrap("requeue matching", rows.Err())
	}, s.Requeue)
}

// AdminQueries implements store.Store.
func (s *Store) AdminQueries() store.AdminQueries {
	return sqladmin.New(s.db, sqlDialect, sqladmin.Schema{
		// A delivery is recorded on the event row (migration 00006).
		DeliveredOnRow: true,
		// Migration 00007: a PENDING row a claim holds is PROCESSING.
		Claimed: statements.MustRenderNamed("admin.claimed", s.t),
	}, s.t)
}
