package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/compensation"
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
		errs[i] = textlimit.ErrorText(o.Error)
		retryMS[i] = o.RetryIn.Milliseconds()
		block[i] = o.Block
		attempted[i] = o.Attempted
		attempt[i] = int32(o.Attempt)
		started[i] = o.StartedAt
		finished[i] = o.FinishedAt
		traceIDs[i] = o.TraceID
	}
	relayID := textlimit.StorableText(req.RelayID, textlimit.MaxRelayIDRunes)
	applied := make(map[int64]bool, n)
	sorted := slices.Compact(slices.Sorted(slices.Values(ids)))
	if allDeliveredAlike(req.Outcomes) {
		o := req.Outcomes[0]
		args := []any{req.Token, relayID, ids, o.StartedAt, o.FinishedAt, eventIDs, attempt, sorted}
		if err := s.completeRows(ctx, s.q.completeDelivered, args, applied); err != nil {
			return store.CompleteResult{}, s.wrap("complete", refusedData(err))
		}
		s.claimer.Completed(req.RelayID, req.Token, ids)
		return backend.NewCompleteResult(req.Outcomes, applied), nil
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
		return backend.NewCompleteResult(req.Outcomes, applied), nil
	}
	if err := s.completeRows(ctx, s.q.complete, args, applied); err != nil {
		return store.CompleteResult{}, s.wrap("complete", refusedData(err))
	}
	s.claimer.Completed(req.RelayID, req.Token, ids)
	return backend.NewCompleteResult(req.Outcomes, applied), nil
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
