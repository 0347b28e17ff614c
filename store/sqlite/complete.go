package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// completeItem is one outcome as completeUpdateSQL reads it.
type completeItem struct {
	ID    int64  `json:"id"`
	Kind  string `json:"kind"`
	Err   string `json:"err"`
	Retry string `json:"retry"`
	Block bool   `json:"block"`
	// D: the delivery is recorded on the row (backend.DeliveredOnRow),
	// with the attempt number, the times and the trace id.
	D        bool    `json:"d,omitempty"`
	Attempt  int     `json:"attempt,omitempty"`
	Started  string  `json:"started,omitempty"`
	Finished string  `json:"finished,omitempty"`
	TraceID  *string `json:"trace_id,omitempty"`
}

// attemptItem is one attempt row as insertAttemptsSQL reads it.
type attemptItem struct {
	ID       int64   `json:"id"`
	EventID  string  `json:"event_id"`
	Kind     string  `json:"kind"`
	Attempt  int     `json:"attempt"`
	Started  string  `json:"started"`
	Finished string  `json:"finished"`
	Error    *string `json:"error"`
	TraceID  *string `json:"trace_id"`
	// Replay: a delivery recorded on the row that this completion did not
	// apply; insertAttemptsSQL writes nothing for it if the row is
	// PROCESSED with its delivery under the same token.
	Replay bool `json:"replay,omitempty"`
}

// appliedRow is a row completeUpdateSQL changed.
type appliedRow struct {
	id                  int64
	aggType, aggID      string
	status, availableAt string
}

// Complete implements store.Store: the guarded state change, dead letters,
// BLOCKED and pushed-back followers and the attempt rows, in one BEGIN
// IMMEDIATE transaction, as completeSQL of the PostgreSQL backend does in one
// statement.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	n := len(req.Outcomes)
	if n == 0 {
		return store.CompleteResult{}, nil
	}
	req = backend.StorableRequest(req)
	items := make([]completeItem, n)
	byID := make(map[int64]*store.Outcome, n)
	for i := range req.Outcomes {
		o := &req.Outcomes[i]
		items[i] = completeItem{ID: o.ID, Kind: string(o.Kind), Err: o.Error, Retry: modifier(o.RetryIn), Block: o.Block}
		if backend.DeliveredOnRow(o) {
			it := &items[i]
			it.D, it.Attempt = true, o.Attempt
			if !o.StartedAt.IsZero() {
				it.Started = formatTime(o.StartedAt)
			}
			if !o.FinishedAt.IsZero() {
				it.Finished = formatTime(o.FinishedAt)
			}
			if o.TraceID != "" {
				it.TraceID = &o.TraceID
			}
		}
		if _, dup := byID[o.ID]; !dup {
			byID[o.ID] = o
		}
	}
	itemsJSON, err := json.Marshal(items)
	if err != nil {
		return store.CompleteResult{}, fmt.Errorf("complete: %w", err)
	}
	applied := make(map[int64]bool, n)
	err = s.writeTx(ctx, func(conn *sql.Conn, now string) error {
		clear(applied)
		fence, err := s.claimFence(ctx, conn, req.Token)
		if err != nil {
			return err
		}
		var rowsChanged []appliedRow
		rows, err := conn.QueryContext(ctx, s.q.completeUpdate, now, req.Token, string(itemsJSON), req.RelayID,
			fence.idsJSON, fence.lanesJSON)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r appliedRow
			if err := rows.Scan(&r.id, &r.aggType, &r.aggID, &r.status, &r.availableAt); err != nil {
				rows.Close()
				return err
			}
			rowsChanged = append(rowsChanged, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		sort.Slice(rowsChanged, func(i, j int) bool { return rowsChanged[i].id < rowsChanged[j].id })
		changedIDs := make([]int64, len(rowsChanged))
		for i, r := range rowsChanged {
			applied[r.id] = true
			changedIDs[i] = r.id
		}
		changedJSON := int64sJSON(changedIDs)

		type aggKey struct{ typ, id string }
		type follow struct {
			id          int64
			availableAt string
		}
		failedHeads := map[aggKey]int64{}
		retried := map[aggKey]*follow{}
		var failedOrder, retriedOrder []aggKey
		for _, r := range rowsChanged {
			k := aggKey{r.aggType, r.aggID}
			o := byID[r.id]
			if r.status == string(outbox.StatusFailed) {
				reason := o.Error
				if reason == "" {
					reason = "failed"
				}
				if _, err := conn.ExecContext(ctx, s.q.deadLetter, r.id, reason, now); err != nil {
					return err
				}
				if _, seen := failedHeads[k]; !seen {
					failedHeads[k] = r.id
					failedOrder = append(failedOrder, k)
				}
			}
			if o.Kind == store.Retry {
				f := retried[k]
				if f == nil {
					f = &follow{id: r.id, availableAt: r.availableAt}
					retried[k] = f
					retriedOrder = append(retriedOrder, k)
				} else if r.availableAt > f.availableAt {
					f.availableAt = r.availableAt
				}
			}
		}
		if req.FailedBlocks {
			for _, k := range failedOrder {
				if _, err := conn.ExecContext(ctx, s.q.blockAfter, k.typ, k.id, failedHeads[k], changedJSON); err != nil {
					return err
				}
			}
		}
		for _, k := range retriedOrder {
			f := retried[k]
			if _, err := conn.ExecContext(ctx, s.q.deferFrom, k.typ, k.id, f.id, f.availableAt, changedJSON); err != nil {
				return err
			}
		}

		var atts []attemptItem
		for i := range req.Outcomes {
			o := &req.Outcomes[i]
			onRow := backend.DeliveredOnRow(o)
			// A delivery recorded on the row writes no attempt row (nor
			// does a second outcome of that row delivered the same way).
			if !o.Attempted || onRow && applied[o.ID] && backend.DeliveredOnRow(byID[o.ID]) {
				continue
			}
			a := attemptItem{ID: o.ID, EventID: o.EventID.String(), Kind: string(o.Kind), Attempt: o.Attempt,
				Started: now, Finished: now}
			if !o.StartedAt.IsZero() {
				a.Started = formatTime(o.StartedAt)
			}
			if !o.FinishedAt.IsZero() {
				a.Finished = formatTime(o.FinishedAt)
			}
			var msg string
			if applied[o.ID] {
				msg = o.Error
			} else if o.Error != "" {
				msg = o.Error + "; " + backend.LeaseLost
			} else {
				msg = backend.LeaseLost
			}
			if msg != "" {
				a.Error = &msg
			}
			if o.TraceID != "" {
				a.TraceID = &o.TraceID
			}
			a.Replay = onRow && !applied[o.ID]
			atts = append(atts, a)
		}
		if len(atts) > 0 {
			attsJSON, err := json.Marshal(atts)
			if err != nil {
				return err
			}
			if _, err := conn.ExecContext(ctx, s.q.insertAttempts, req.Token, req.RelayID, string(attsJSON)); err != nil {
				return err
			}
		}
		if err := s.dropFromClaim(ctx, conn, req.Token, fence, req.Outcomes); err != nil {
			return err
		}
		// Compensating events of the rows this completion moved to
		// EXPIRED, in the same transaction.
		var expiredIDs []int64
		for _, r := range rowsChanged {
			if r.status == string(outbox.StatusExpired) {
				expiredIDs = append(expiredIDs, r.id)
			}
		}
		if len(expiredIDs) == 0 {
			return nil
		}
		rows, err = conn.QueryContext(ctx, s.q.expiredRows, int64sJSON(expiredIDs))
		if err != nil {
			return err
		}
		xs, _, err := scanExpired(rows)
		if err != nil {
			return err
		}
		return s.compensate(ctx, conn, now, xs, req.RelayID)
	})
	if err != nil {
		return store.CompleteResult{}, s.wrap("complete", refusedData(err))
	}
	ids := make([]int64, len(req.Outcomes))
	for i, o := range req.Outcomes {
		ids[i] = o.ID
	}
	s.claimer.Completed(req.RelayID, req.Token, ids)
	return backend.NewCompleteResult(req.Outcomes, applied), nil
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
	err := c.QueryRowContext(ctx, s.q.claimRow, token).Scan(&ls, &ts, &ids)
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

// dropFromClaim takes the rows of outs out of claim token's row, and
// deletes the row when none is left. A claim whose lanes are all gone is
// left to the sweeper, which audits its rows.
func (s *Store) dropFromClaim(ctx context.Context, c *sql.Conn, token string, f claimFence, outs []store.Outcome) error {
	if !f.live {
		return nil
	}
	done := make(map[int64]bool, len(outs))
	for _, o := range outs {
		done[o.ID] = true
	}
	left := slices.DeleteFunc(slices.Clone(f.ids), func(id int64) bool { return done[id] })
	if len(left) == 0 {
		_, err := c.ExecContext(ctx, s.q.claimDelete, token)
		return err
	}
	_, err := c.ExecContext(ctx, s.q.claimIDs, token, int64sJSON(left))
	return err
}
