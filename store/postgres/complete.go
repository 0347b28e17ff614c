package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/compensation"
	"github.com/txoutbox/outbox/store/internal/completion"
)

// completeSQL holds the completion's statements (sql/complete.sql),
// rendered with the table names.
type completeSQL struct {
	any, expiring, delivered string
}

func buildCompleteSQL(t store.Tables) completeSQL {
	r := func(name string) string { return statements.MustRenderNamed(name, t) }
	return completeSQL{
		any:       r("complete.any"),
		expiring:  r("complete.expiring"),
		delivered: r("complete.delivered"),
	}
}

// Complete implements store.Store: the plan of store/internal/completion
// in one statement, complete.any, whose arrays the plan supplies. A batch
// of deliveries alike takes the shorter complete.delivered; one with
// EXPIRED outcomes takes complete.expiring, whose applied rows come back
// with what their compensating events need.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	p, err := completion.New(req)
	if err != nil || p.Empty() {
		return store.CompleteResult{}, err
	}
	applied := make(map[int64]bool, len(p.Rows))
	ids := p.OutcomeIDs()
	if p.DeliveredAlike() {
		o := &p.Outcomes[0]
		eventIDs := make([]string, len(p.Outcomes))
		attempt := make([]int32, len(p.Outcomes))
		var receipts []*string // NULL when the sink recorded none
		for i := range p.Outcomes {
			eventIDs[i] = p.Outcomes[i].EventID.String()
			attempt[i] = int32(p.Outcomes[i].Attempt)
			if r := p.Outcomes[i].Receipt; r != nil {
				if receipts == nil {
					receipts = make([]*string, len(p.Outcomes))
				}
				receipts[i] = receiptArg(r)
			}
		}
		args := []any{p.Token, p.StoredRelayID, ids, o.StartedAt, o.FinishedAt, eventIDs, attempt, p.IDs(), backend.LeaseLost, receipts}
		if err := s.completeRows(ctx, s.q.complete.delivered, args, applied); err != nil {
			return store.CompleteResult{}, s.wrap("complete", refusedData(err))
		}
		s.claimer.Completed(p.RelayID, p.Token, ids)
		return p.Result(applied), nil
	}
	args := planArgs(p)
	if p.HasExpired() {
		// An EXPIRED event may have a compensating event to enqueue: in
		// the transaction of the move, so that it exists if and only if
		// the event ended EXPIRED.
		err := retrySerialization(ctx, func() error {
			clear(applied)
			return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, s.q.complete.expiring, args...)
				if err != nil {
					return err
				}
				xs, err := scanApplied(rows, applied)
				if err != nil {
					return err
				}
				return s.compensate(ctx, tx, xs, p.RelayID)
			})
		})
		if err != nil {
			return store.CompleteResult{}, s.wrap("complete", err)
		}
		s.claimer.Completed(p.RelayID, p.Token, ids)
		return p.Result(applied), nil
	}
	if err := s.completeRows(ctx, s.q.complete.any, args, applied); err != nil {
		return store.CompleteResult{}, s.wrap("complete", refusedData(err))
	}
	s.claimer.Completed(p.RelayID, p.Token, ids)
	return p.Result(applied), nil
}

// planArgs are the arguments of complete.rows: the outcomes ($4 to $12,
// $25 to $27) and the plan's rows with what each becomes ($13 to $24,
// $28).
func planArgs(p *completion.Plan) []any {
	n := len(p.Outcomes)
	ids := make([]int64, n)
	eventIDs := make([]string, n)
	kinds := make([]string, n)
	errs := make([]string, n)
	attempted := make([]bool, n)
	attempt := make([]int32, n)
	started := make([]time.Time, n)
	finished := make([]time.Time, n)
	traceIDs := make([]string, n)
	onRow := make([]bool, n)
	lostErrs := make([]string, n)
	receipts := make([]*string, n)
	for i := range p.Outcomes {
		o := &p.Outcomes[i]
		ids[i] = o.ID
		eventIDs[i] = o.EventID.String()
		kinds[i] = string(o.Kind)
		errs[i] = o.Error
		attempted[i] = o.Attempted
		attempt[i] = int32(o.Attempt)
		started[i] = o.StartedAt
		finished[i] = o.FinishedAt
		traceIDs[i] = o.TraceID
		onRow[i] = backend.DeliveredOnRow(o)
		lostErrs[i], _ = completion.AttemptError(o, false)
		receipts[i] = receiptArg(o.Receipt)
	}
	m := len(p.Rows)
	status := make([]string, m)
	addRetry := make([]int32, m)
	finish := make([]bool, m)
	retryMS := make([]*int64, m)
	lastError := make([]*string, m)
	reason := make([]*string, m)
	push := make([]bool, m)
	rowOnRow := make([]bool, m)
	rowStarted := make([]time.Time, m)
	rowFinished := make([]time.Time, m)
	rowTrace := make([]string, m)
	rowReceipt := make([]*string, m)
	for i := range p.Rows {
		r := &p.Rows[i]
		status[i] = string(r.Status)
		if r.CountsRetry {
			addRetry[i] = 1
		}
		finish[i] = r.Finishes
		if r.Reschedules {
			ms := r.AvailableIn.Milliseconds()
			retryMS[i] = &ms
		}
		if r.SetsError {
			lastError[i] = &r.Error
		}
		if r.DeadLetter {
			reason[i] = &r.Reason
		}
		push[i] = r.PushesBack
		rowOnRow[i] = r.OnRow
		rowStarted[i], rowFinished[i], rowTrace[i] = r.StartedAt, r.FinishedAt, r.TraceID
		rowReceipt[i] = receiptArg(r.Receipt)
	}
	return []any{p.Token, p.StoredRelayID, p.FailedBlocks,
		ids, eventIDs, kinds, errs, attempted, attempt, started, finished, traceIDs,
		p.IDs(), status, addRetry, finish, retryMS, lastError, reason, push, rowOnRow, rowStarted, rowFinished, rowTrace,
		onRow, lostErrs, receipts, rowReceipt}
}

// receiptArg is a receipt as a text parameter: NULL when there is none.
func receiptArg(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
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

// scanApplied reads complete.expiring's rows: every applied id goes in
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
