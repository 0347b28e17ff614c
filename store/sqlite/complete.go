package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/completion"
)

// completeSQL holds the completion's statements (sql/complete.sql),
// rendered with the table names.
type completeSQL struct {
	claimRow, claimIDs, update, deadLetter string
	blockAfter, deferFrom, insertAttempts  string
	expiredRows                            string
}

func buildCompleteSQL(t store.Tables) completeSQL {
	r := func(name string) string { return statements.MustRenderNamed(name, namesFor(t)) }
	return completeSQL{
		claimRow:       r("complete.claim_row"),
		claimIDs:       r("complete.claim_ids"),
		update:         r("complete.update"),
		deadLetter:     r("complete.dead_letter"),
		blockAfter:     r("complete.block_after"),
		deferFrom:      r("complete.defer"),
		insertAttempts: r("complete.insert_attempts"),
		expiredRows:    r("complete.expired_rows"),
	}
}

// rowItem is one row of the plan as complete.update reads it.
type rowItem struct {
	ID     int64   `json:"id"`
	Status string  `json:"status"`
	Add    int     `json:"add"`
	Fin    bool    `json:"fin"`
	Retry  *string `json:"retry"`
	SetErr bool    `json:"set_err"`
	Err    string  `json:"err"`
	// D: the delivery is recorded on the row, with the attempt number, the
	// times and the trace id.
	D        bool    `json:"d,omitempty"`
	Attempt  int     `json:"attempt,omitempty"`
	Started  string  `json:"started,omitempty"`
	Finished string  `json:"finished,omitempty"`
	TraceID  *string `json:"trace_id,omitempty"`
	Receipt  *string `json:"receipt,omitempty"`
}

// attemptItem is one attempt row as complete.insert_attempts reads it.
type attemptItem struct {
	ID       int64   `json:"id"`
	EventID  string  `json:"event_id"`
	Kind     string  `json:"kind"`
	Attempt  int     `json:"attempt"`
	Started  string  `json:"started"`
	Finished string  `json:"finished"`
	Error    *string `json:"error"`
	TraceID  *string `json:"trace_id"`
	Receipt  *string `json:"receipt,omitempty"`
	Replay   bool    `json:"replay,omitempty"`
}

// Complete implements store.Store: the plan of store/internal/completion,
// in one BEGIN IMMEDIATE transaction.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	p, err := completion.New(req)
	if err != nil || p.Empty() {
		return store.CompleteResult{}, err
	}
	itemsJSON, err := json.Marshal(rowItems(p))
	if err != nil {
		return store.CompleteResult{}, fmt.Errorf("complete: %w", err)
	}
	applied := make(map[int64]bool, len(p.Rows))
	err = s.writeTx(ctx, func(conn *sql.Conn, now string) error {
		clear(applied)
		return s.completeTx(ctx, conn, now, p, string(itemsJSON), applied)
	})
	if err != nil {
		return store.CompleteResult{}, s.wrap("complete", refusedData(err))
	}
	s.claimer.Completed(p.RelayID, p.Token, p.OutcomeIDs())
	return p.Result(applied), nil
}

// rowItems renders the plan's rows for complete.update.
func rowItems(p *completion.Plan) []rowItem {
	items := make([]rowItem, len(p.Rows))
	for i, r := range p.Rows {
		it := rowItem{ID: r.ID, Status: string(r.Status), Fin: r.Finishes, SetErr: r.SetsError, Err: r.Error}
		if r.CountsRetry {
			it.Add = 1
		}
		if r.Reschedules {
			m := modifier(r.AvailableIn)
			it.Retry = &m
		}
		if r.OnRow {
			it.D, it.Attempt = true, r.Attempt
			if !r.StartedAt.IsZero() {
				it.Started = formatTime(r.StartedAt)
			}
			if !r.FinishedAt.IsZero() {
				it.Finished = formatTime(r.FinishedAt)
			}
			if r.TraceID != "" {
				it.TraceID = &r.TraceID
			}
			if r.Receipt != nil {
				s := string(r.Receipt)
				it.Receipt = &s
			}
		}
		items[i] = it
	}
	return items
}

// completeTx runs the plan's steps in the write transaction.
func (s *Store) completeTx(ctx context.Context, conn *sql.Conn, now string, p *completion.Plan, itemsJSON string, applied map[int64]bool) error {
	q := &s.q.complete
	fence, err := s.claimFence(ctx, conn, p.Token)
	if err != nil {
		return err
	}
	rows, err := conn.QueryContext(ctx, q.update, now, p.Token, itemsJSON, p.StoredRelayID, fence.idsJSON, fence.lanesJSON)
	if err != nil {
		return err
	}
	var changed []completion.Applied
	for rows.Next() {
		var (
			a             completion.Applied
			status, avail string
		)
		if err := rows.Scan(&a.ID, &a.AggregateType, &a.AggregateID, &status, &avail); err != nil {
			rows.Close()
			return err
		}
		if a.AvailableAt, err = parseTime(avail); err != nil {
			rows.Close()
			return err
		}
		changed = append(changed, a)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	slices.SortFunc(changed, func(a, b completion.Applied) int { return cmp.Compare(a.ID, b.ID) })
	changedIDs := make([]int64, len(changed))
	for i, a := range changed {
		applied[a.ID] = true
		changedIDs[i] = a.ID
	}
	changedJSON := int64sJSON(changedIDs)

	for _, r := range p.DeadLetters(changedIDs) {
		if _, err := conn.ExecContext(ctx, q.deadLetter, r.ID, r.Reason, now); err != nil {
			return err
		}
	}
	holds := p.Holds(changed)
	for _, h := range holds.Block {
		if _, err := conn.ExecContext(ctx, q.blockAfter, h.AggregateType, h.AggregateID, h.ID, changedJSON); err != nil {
			return err
		}
	}
	for _, h := range holds.Defer {
		if _, err := conn.ExecContext(ctx, q.deferFrom, h.AggregateType, h.AggregateID, h.ID, formatTime(h.AvailableAt), changedJSON); err != nil {
			return err
		}
	}
	if err := s.insertAttempts(ctx, conn, now, p, applied); err != nil {
		return err
	}
	if err := s.dropFromClaim(ctx, conn, p, fence); err != nil {
		return err
	}
	// Compensating events of the rows this completion moved to EXPIRED,
	// in the same transaction.
	expired := p.Expired(changedIDs)
	if len(expired) == 0 {
		return nil
	}
	rows, err = conn.QueryContext(ctx, q.expiredRows, int64sJSON(expired))
	if err != nil {
		return err
	}
	xs, _, err := scanExpired(rows)
	if err != nil {
		return err
	}
	return s.compensate(ctx, conn, now, xs, p.RelayID)
}

// insertAttempts writes the plan's attempt rows; the replay of a delivery
// recorded on its row is sorted out by the statement.
func (s *Store) insertAttempts(ctx context.Context, conn *sql.Conn, now string, p *completion.Plan, applied map[int64]bool) error {
	var atts []attemptItem
	for _, a := range p.Attempts(applied, nil) {
		it := attemptItem{ID: a.ID, EventID: a.EventID.String(), Kind: string(a.Kind), Attempt: a.Attempt,
			Started: now, Finished: now, Replay: a.Replay}
		if !a.StartedAt.IsZero() {
			it.Started = formatTime(a.StartedAt)
		}
		if !a.FinishedAt.IsZero() {
			it.Finished = formatTime(a.FinishedAt)
		}
		if a.HasError {
			msg := a.Error
			it.Error = &msg
		}
		if a.TraceID != "" {
			it.TraceID = &a.TraceID
		}
		if a.Receipt != nil {
			s := string(a.Receipt)
			it.Receipt = &s
		}
		atts = append(atts, it)
	}
	if len(atts) == 0 {
		return nil
	}
	attsJSON, err := json.Marshal(atts)
	if err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, s.q.complete.insertAttempts, p.Token, p.StoredRelayID, string(attsJSON))
	return err
}

// claimFence is what a completion may change: the rows of its claim
// (idsJSON) in the lanes still held under the tokens the claim was made
// under (lanesJSON). Without the claim's row, nothing.
type claimFence struct {
	idsJSON, lanesJSON string
	ids                []int64
	live               bool // some lane is still held: the claim's row is kept up to date
}

// claimFence reads the fence of claim token.
func (s *Store) claimFence(ctx context.Context, c *sql.Conn, token string) (claimFence, error) {
	f := claimFence{idsJSON: "[]", lanesJSON: "[]"}
	var ls, ts, ids string
	err := c.QueryRowContext(ctx, s.q.complete.claimRow, token).Scan(&ls, &ts, &ids)
	if errors.Is(err, sql.ErrNoRows) {
		return f, nil
	}
	if err != nil {
		return f, err
	}
	m, err := laneTokens(ls, ts)
	if err != nil {
		return f, err
	}
	held, _, err := s.heldLanesOf(ctx, c, m, 0)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal([]byte(ids), &f.ids); err != nil {
		return f, fmt.Errorf("claim %s: ids: %w", token, err)
	}
	if len(held) == 0 {
		return f, nil
	}
	lanesJSON, err := json.Marshal(slices.Sorted(maps.Keys(held)))
	if err != nil {
		return f, err
	}
	f.idsJSON, f.lanesJSON, f.live = ids, string(lanesJSON), true
	return f, nil
}

// dropFromClaim takes the plan's rows out of the claim's row, and deletes
// the row when none is left. A claim whose lanes are all gone is left to
// the sweeper, which audits its rows.
func (s *Store) dropFromClaim(ctx context.Context, c *sql.Conn, p *completion.Plan, f claimFence) error {
	if !f.live {
		return nil
	}
	left, changed := p.ClaimLeft(f.ids)
	switch {
	case len(left) == 0:
		_, err := c.ExecContext(ctx, s.q.claimDelete, p.Token)
		return err
	case !changed:
		return nil
	}
	_, err := c.ExecContext(ctx, s.q.complete.claimIDs, p.Token, int64sJSON(left))
	return err
}
