package postgres

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/compensation"
	"github.com/txoutbox/outbox/store/internal/pages"
	"github.com/txoutbox/outbox/store/internal/retry"
)

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	n := len(req.Outcomes)
	if n == 0 {
		return store.CompleteResult{}, nil
	}
	ids := make([]int64, n)
	eventIDs := make([]string, n)
	kinds := make([]string, n)
	errs := make([]string, n)
	retryMS := make([]int64, n)
	block := make([]bool, n)
	attempted := make([]bool, n)
	attempt := make([]int32, n)
	started := make([]time.Time, n)
	finished := make([]time.Time, n)
	traceIDs := make([]string, n)
	for i, o := range req.Outcomes {
		ids[i] = o.ID
		eventIDs[i] = o.EventID.String()
		kinds[i] = string(o.Kind)
		errs[i] = store.ErrorText(o.Error)
		retryMS[i] = o.RetryIn.Milliseconds()
		block[i] = o.Block
		attempted[i] = o.Attempted
		attempt[i] = int32(o.Attempt)
		started[i] = o.StartedAt
		finished[i] = o.FinishedAt
		traceIDs[i] = o.TraceID
	}
	relayID := store.StorableText(req.RelayID, store.MaxRelayIDRunes)
	applied := make(map[int64]bool, n)
	sorted := slices.Compact(slices.Sorted(slices.Values(ids)))
	if allDeliveredAlike(req.Outcomes) {
		o := req.Outcomes[0]
		args := []any{req.Token, relayID, ids, o.StartedAt, o.FinishedAt, eventIDs, attempt, sorted}
		if err := s.completeRows(ctx, s.q.completeDelivered, args, applied); err != nil {
			return store.CompleteResult{}, s.wrap("complete", refusedData(err))
		}
		s.claimer.Completed(req.RelayID, req.Token, ids)
		return store.NewCompleteResult(req.Outcomes, applied), nil
	}
	args := []any{req.Token, relayID, req.FailedBlocks,
		ids, eventIDs, kinds, errs, retryMS, block, attempted, attempt, started, finished, traceIDs, sorted}
	if hasExpired(req.Outcomes) {
		// An EXPIRED event may have a compensating event to enqueue: in
		// the transaction of the move, so that it exists if and only if
		// the event ended EXPIRED.
		err := retrySerialization(ctx, func() error {
			clear(applied)
			return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, s.q.completeExpiring, args...)
				if err != nil {
					return err
				}
				xs, err := scanApplied(rows, applied)
				if err != nil {
					return err
				}
				return s.compensate(ctx, tx, xs, req.RelayID)
			})
		})
		if err != nil {
			return store.CompleteResult{}, s.wrap("complete", err)
		}
		s.claimer.Completed(req.RelayID, req.Token, ids)
		return store.NewCompleteResult(req.Outcomes, applied), nil
	}
	if err := s.completeRows(ctx, s.q.complete, args, applied); err != nil {
		return store.CompleteResult{}, s.wrap("complete", refusedData(err))
	}
	s.claimer.Completed(req.RelayID, req.Token, ids)
	return store.NewCompleteResult(req.Outcomes, applied), nil
}

// completeRows runs a completion statement that returns the applied ids.
func (s *Store) completeRows(ctx context.Context, query string, args []any, applied map[int64]bool) error {
	return retrySerialization(ctx, func() error {
		clear(applied)
		rows, err := s.pool.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			applied[id] = true
		}
		return rows.Err()
	})
}

// allDeliveredAlike reports whether completeDeliveredSQL can record the
// batch: every outcome DELIVERED and attempted, without error or trace
// id, with one start and one end.
func allDeliveredAlike(outs []store.Outcome) bool {
	for i := range outs {
		o := &outs[i]
		if o.Kind != store.Delivered || !o.Attempted || o.Error != "" || o.TraceID != "" ||
			!o.StartedAt.Equal(outs[0].StartedAt) || !o.FinishedAt.Equal(outs[0].FinishedAt) {
			return false
		}
	}
	return true
}

// hasExpired reports whether any outcome is EXPIRED.
func hasExpired(outs []store.Outcome) bool {
	for i := range outs {
		if outs[i].Kind == store.Expired {
			return true
		}
	}
	return false
}

// scanApplied reads completeExpiring's rows: every applied id goes in
// applied, and the EXPIRED ones with a compensating event are returned.
func scanApplied(rows pgx.Rows, applied map[int64]bool) ([]compensation.Expired, error) {
	defer rows.Close()
	var xs []compensation.Expired
	for rows.Next() {
		x, err := scanExpiredRow(rows)
		if err != nil {
			return nil, err
		}
		applied[x.ID] = true
		if x.OnExpired != nil {
			xs = append(xs, x)
		}
	}
	return xs, rows.Err()
}

// Sweep implements store.Store.
func (s *Store) Sweep(ctx context.Context, req store.SweepRequest) (store.SweepResult, error) {
	req = req.Normalize()
	res, err := pages.Sweep(req, s.wrap, func(step pages.SweepStep) (int64, error) {
		var query string
		var args []any
		switch step {
		case pages.SweepReap:
			// Claims whose lanes are gone, then rows PROCESSING under a
			// lease of the schema before lanes.
			relay := store.StorableText(req.RelayID, store.MaxRelayIDRunes)
			var n int64
			err := retrySerialization(ctx, func() error {
				var err error
				n, err = s.execOrCount(ctx, s.q.reapClaims, req.Limit, relay)
				return err
			})
			if err != nil {
				return n, err
			}
			var legacy int64
			err = retrySerialization(ctx, func() error {
				var err error
				legacy, err = s.execOrCount(ctx, s.q.reap, req.Limit, relay)
				return err
			})
			return n + legacy, err
		case pages.SweepExpire:
			return s.expirePage(ctx, req)
		case pages.SweepBlock:
			query, args = s.q.block, []any{req.Limit}
		case pages.SweepUnblock:
			query, args = s.q.unblock, []any{req.Limit, req.FailedBlocks}
		}
		var n int64
		err := retrySerialization(ctx, func() error {
			var err error
			n, err = s.execOrCount(ctx, query, args...)
			return err
		})
		return n, err
	})
	if err != nil {
		return res, err
	}
	s.maybeAnalyze(ctx)
	return res, nil
}

// execOrCount runs a statement that either ends in "SELECT count(*)" (and
// returns that count) or is a plain UPDATE (and returns rows affected).
func (s *Store) execOrCount(ctx context.Context, query string, args ...any) (int64, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	counted := false
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
		counted = true
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if !counted {
		n = rows.CommandTag().RowsAffected()
	}
	return n, nil
}

// CountMovable implements store.Store.
func (s *Store) CountMovable(ctx context.Context, failedBlocks bool) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, s.q.countMovable, failedBlocks).Scan(&n); err != nil {
		return 0, s.wrap("count movable events", err)
	}
	return n, nil
}

// serializationRetry retries deadlocks and serialization failures, which
// concurrent claims, marks and sweeps can cause.
var serializationRetry = retry.Policy{
	Attempts:  10,
	First:     5 * time.Millisecond,
	Max:       500 * time.Millisecond,
	Retryable: isRetryableConflict,
}

// retrySerialization retries f on deadlocks and serialization failures,
// which concurrent claims, marks and sweeps can cause; they are never
// reported as event failures.
func retrySerialization(ctx context.Context, f func() error) error {
	return serializationRetry.Do(ctx, f)
}

func isRetryableConflict(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "40P01", "40001", "55P03": // deadlock, serialization failure, lock not available
		return true
	}
	return false
}

// refusedData marks the errors PostgreSQL gives for the values of a write
// (SQLSTATE class 22 data exception, class 54 program limit exceeded, and
// the constraints on a row's own values: 23502 not null, 23514 check)
// with store.ErrRefused: retrying them cannot succeed. Every other error
// is the database's, not the data's (a read-only server 25006, a shutdown
// 57P01, a lost connection 08xxx, a unique or foreign key conflict with
// another row): the relay retries those and never ends an event FAILED
// for them.
func refusedData(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) != 5 {
		return err
	}
	switch {
	case pe.Code[:2] == "22", pe.Code[:2] == "54", pe.Code == "23502", pe.Code == "23514":
		return backend.Refused(err)
	}
	return err
}
