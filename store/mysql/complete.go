package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/completion"
)

// completeSQL holds the completion's fixed statements (sql/complete.sql),
// rendered with the table names; the others take per-call fragments
// (renderComplete).
type completeSQL struct {
	claimRow, claimIDs, claimDelete string
}

func buildCompleteSQL(t store.Tables) completeSQL {
	r := func(name string) string { return statements.MustRenderNamed(name, fragments{Tables: t}) }
	return completeSQL{
		claimRow:    r("complete.claim_row"),
		claimIDs:    r("complete.claim_ids"),
		claimDelete: r("complete.claim_delete"),
	}
}

// renderComplete renders the statement name of sql/complete.sql with the
// per-call fragments f.
func (s *Store) renderComplete(name string, f fragments) (string, error) {
	f.Tables = s.q.t
	return statements.RenderNamed(name, f)
}

// Complete implements store.Store: the plan of store/internal/completion,
// in one READ COMMITTED transaction (completeSQL of the PostgreSQL backend
// does it in one statement):
//
//  1. the fence: lock the claim's row (its token) and, with a share lock,
//     the rows of its lanes, which a balance then cannot take until this
//     commits; a row may change only while it is PENDING, one of the
//     claim's ids, in a lane still held under the token the claim was made
//     under. Without the claim's row (its lanes all ended and the sweeper
//     reaped it, or a claim of the schema before lanes) nothing changes;
//  2. lock those rows by primary key, in id order, and apply one UPDATE
//     per kind of outcome present (usually one: DELIVERED);
//  3. dead letters for the new FAILED rows;
//  4. the waiting rows of the aggregates the plan holds back become
//     BLOCKED or take a later available_at, but for the rows a claim
//     holds: found by a read that takes no locks, then changed by primary
//     key, so that a producer's uncommitted rows are never waited for;
//  5. the attempt rows, with INSERT IGNORE on their key (event, token,
//     outcome), so that a replay after an ambiguous commit writes nothing
//     twice; a fenced outcome is audited too, as a lost lease;
//  6. the compensating events of the rows moved to EXPIRED;
//  7. the completed rows leave the claim's row, which goes when none is
//     left (a claim whose lanes all ended is left to the sweeper).
//
// A batch that is all DELIVERED, the common case, first tries a shorter
// transaction: the fence, the guarded UPDATE of all its rows, the attempt
// rows and the claim's row. If the UPDATE did not change every row, that
// transaction is rolled back and the general one above runs.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	p, err := completion.New(req)
	if err != nil || p.Empty() {
		return store.CompleteResult{}, err
	}
	applied := make(map[int64]bool, len(p.Rows))
	done := false
	if p.AllDelivered() {
		err = s.inTx(ctx, "complete", func(tx *sql.Tx) error {
			clear(applied)
			f, err := s.claimFence(ctx, tx, p.Token)
			if err != nil {
				return err
			}
			return s.completeDelivered(ctx, tx, p, f, applied)
		})
		done = err == nil
		if errors.Is(err, errSomeFenced) {
			err = nil
		}
	}
	if !done && err == nil {
		err = s.inTx(ctx, "complete", func(tx *sql.Tx) error {
			clear(applied)
			f, err := s.claimFence(ctx, tx, p.Token)
			if err != nil {
				return err
			}
			return s.completeAny(ctx, tx, p, f, applied)
		})
	}
	if err != nil {
		return store.CompleteResult{}, s.wrap("complete", refusedData(err))
	}
	s.claimer.Completed(p.RelayID, p.Token, p.IDs())
	return p.Result(applied), nil
}

// errSomeFenced rolls the fast path back when not every row was the
// claim's to change.
var errSomeFenced = errors.New("some rows are no longer held by the claim")

// claimFence is what a completion may change: the rows of its claim (ids,
// all as stored) in the lanes still held under the tokens the claim was
// made under (lanes), and the database clock.
type claimFence struct {
	ids   map[int64]bool
	all   []int64
	lanes []int
	now   time.Time
}

// live reports whether some lane of the claim is still held: its row is
// then kept up to date.
func (f claimFence) live() bool { return len(f.lanes) > 0 }

// claimFence locks the row of claim token and reads its fence, the lanes
// under a share lock.
func (s *Store) claimFence(ctx context.Context, tx *sql.Tx, token string) (claimFence, error) {
	var (
		f               claimFence
		ls, ts, idsJSON []byte
		m               map[int]int64
	)
	err := tx.QueryRowContext(ctx, s.q.complete.claimRow, token).Scan(&ls, &ts, &idsJSON)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return f, err
	default:
		if m, err = laneTokens(token, ls, ts); err != nil {
			return f, err
		}
		if err := json.Unmarshal(idsJSON, &f.all); err != nil {
			return f, fmt.Errorf("claim %s: ids: %w", token, err)
		}
	}
	held, _, now, err := s.heldLanes(ctx, tx, m, 0)
	if err != nil {
		return f, err
	}
	f.now, f.lanes = now, slices.Sorted(maps.Keys(held))
	f.ids = make(map[int64]bool, len(f.all))
	for _, id := range f.all {
		f.ids[id] = true
	}
	return f, nil
}

// laneList renders the fence's lanes as a SQL list (integers).
func (f claimFence) laneList() string {
	ls := make([]int64, len(f.lanes))
	for i, l := range f.lanes {
		ls[i] = int64(l)
	}
	return idList(ls)
}

// dropFromClaim takes the plan's rows out of the claim's row, and deletes
// the row when none is left. A claim whose lanes are all gone is left to
// the sweeper, which audits its rows.
func (s *Store) dropFromClaim(ctx context.Context, tx *sql.Tx, p *completion.Plan, f claimFence) error {
	if !f.live() {
		return nil
	}
	left, changed := p.ClaimLeft(f.all)
	switch {
	case len(left) == 0:
		_, err := tx.ExecContext(ctx, s.q.complete.claimDelete, p.Token)
		return err
	case !changed:
		return nil
	}
	_, err := tx.ExecContext(ctx, s.q.complete.claimIDs, int64sJSON(left), p.Token)
	return err
}

// completeDelivered is the common case, a batch all delivered, in a few
// statements: the fence, one guarded UPDATE, the attempt rows and the
// claim's row. If the UPDATE did not change every row (some were fenced),
// it returns errSomeFenced and the transaction is rolled back, for
// completeAny to sort the rows out.
func (s *Store) completeDelivered(ctx context.Context, tx *sql.Tx, p *completion.Plan, f claimFence, applied map[int64]bool) error {
	ids := p.IDs()
	if !f.live() {
		return errSomeFenced
	}
	for _, id := range ids {
		if !f.ids[id] {
			return errSomeFenced
		}
	}
	sets, args := deliveredSets(p, p.OnRow(nil), "")
	if len(sets) > 0 {
		sets = ", " + sets
	}
	q, err := s.renderComplete("complete.delivered", fragments{IDs: idList(ids), Sets: sets, Marks: f.laneList()})
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(ids)) {
		return errSomeFenced
	}
	for _, id := range ids {
		applied[id] = true
	}
	if err := s.insertAttempts(ctx, tx, p, applied, nil, time.Time{}); err != nil {
		return err
	}
	return s.dropFromClaim(ctx, tx, p, f)
}

// completeAny handles any mix of outcomes and fenced rows.
func (s *Store) completeAny(ctx context.Context, tx *sql.Tx, p *completion.Plan, f claimFence, applied map[int64]bool) error {
	var mine []completion.Applied
	eligible := slices.DeleteFunc(p.IDs(), func(id int64) bool { return !f.ids[id] })
	if f.live() && len(eligible) > 0 {
		query, err := s.renderComplete("complete.lock", fragments{IDs: idList(eligible), Marks: f.laneList()})
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, query)
		if err != nil {
			return err
		}
		for rows.Next() {
			var a completion.Applied
			if err := rows.Scan(&a.ID, &a.AggregateType, &a.AggregateID); err != nil {
				rows.Close()
				return err
			}
			mine = append(mine, a)
			applied[a.ID] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	now := f.now
	mineIDs := make([]int64, len(mine))
	for i := range mine {
		mineIDs[i] = mine[i].ID
		// The new available_at of a rescheduled row, as complete.update
		// computes it.
		if r := p.Row(mine[i].ID); r.Reschedules {
			mine[i].AvailableAt = now.Add(r.AvailableIn.Truncate(time.Microsecond))
		}
	}
	if len(mine) > 0 {
		if err := s.applyOutcomes(ctx, tx, p, mine, mineIDs, now); err != nil {
			return err
		}
	}
	replays, err := s.deliveredReplays(ctx, tx, p, applied)
	if err != nil {
		return err
	}
	if err := s.insertAttempts(ctx, tx, p, applied, replays, now); err != nil {
		return err
	}
	if err := s.compensateExpired(ctx, tx, p.Expired(mineIDs), now, p.RelayID); err != nil {
		return err
	}
	return s.dropFromClaim(ctx, tx, p, f)
}

// applyOutcomes changes the rows of mine (locked, ours, in id order) as
// the plan says, writes the dead letters, and holds back the aggregates'
// waiting rows.
func (s *Store) applyOutcomes(ctx context.Context, tx *sql.Tx, p *completion.Plan, mine []completion.Applied,
	mineIDs []int64, now time.Time) error {
	nowText := formatTime(now)
	kinds, byKind := p.Group(mineIDs)
	for _, kind := range kinds {
		if err := s.updateRows(ctx, tx, p, byKind[kind], nowText); err != nil {
			return err
		}
	}
	if dead := p.DeadLetters(mineIDs); len(dead) > 0 {
		var reasons strings.Builder
		ids := make([]int64, len(dead))
		args := make([]any, 0, len(dead)+1)
		for i, r := range dead {
			ids[i] = r.ID
			fmt.Fprintf(&reasons, " WHEN %d THEN ?", r.ID)
			args = append(args, r.Reason)
		}
		args = append(args, nowText)
		q, err := s.renderComplete("complete.dead_letter", fragments{IDs: idList(ids), Cases: reasons.String()})
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	holds := p.Holds(mine)
	if holds.Empty() {
		return nil
	}
	// The waiting rows of those aggregates, read without locks (a
	// producer's uncommitted rows are not waited for), excluding the rows
	// this completion changed: PostgreSQL's single statement does not see
	// them as PENDING either.
	var cond strings.Builder
	var args []any
	for _, h := range slices.Concat(holds.Block, holds.Defer) {
		if cond.Len() > 0 {
			cond.WriteString(" OR ")
		}
		cond.WriteString("(aggregate_type = ? AND aggregate_id = ? AND unfinished = 1 AND id > ?)")
		args = append(args, h.AggregateType, h.AggregateID, h.ID)
	}
	q, err := s.renderComplete("complete.behind", fragments{Cond: cond.String(), IDs: idList(mineIDs)})
	if err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	var block []int64
	deferTo := map[int64]string{}
	for rows.Next() {
		var (
			id    int64
			k     aggKey
			avail nullTime
		)
		if err := rows.Scan(&id, &k.typ, &k.id, &avail); err != nil {
			rows.Close()
			return err
		}
		b, at := holds.Behind(k.typ, k.id, id, avail.Time)
		if b {
			block = append(block, id)
		}
		if !at.IsZero() {
			deferTo[id] = formatTime(at)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	slices.Sort(block)
	return s.holdBack(ctx, tx, block, deferTo)
}

// updateRows applies the changes of rows ids, all of one kind of outcome,
// which complete.lock locked, by primary key. Values that differ per row
// are CASE id expressions.
func (s *Store) updateRows(ctx context.Context, tx *sql.Tx, p *completion.Plan, ids []int64, now string) error {
	var (
		sets []string
		args []any
	)
	set := func(clause string, a ...any) {
		sets = append(sets, clause)
		args = append(args, a...)
	}
	rows := make([]*completion.Row, len(ids))
	for i, id := range ids {
		rows[i] = p.Row(id)
	}
	perRow := func(value func(r *completion.Row) any) (string, []any) {
		var b strings.Builder
		a := make([]any, 0, len(rows))
		b.WriteString("CASE id")
		for _, r := range rows {
			fmt.Fprintf(&b, " WHEN %d THEN ?", r.ID)
			a = append(a, value(r))
		}
		b.WriteString(" END")
		return b.String(), a
	}
	first := rows[0].Change
	if slices.ContainsFunc(rows, func(r *completion.Row) bool { return r.Status != first.Status }) {
		expr, a := perRow(func(r *completion.Row) any { return string(r.Status) })
		set("status = "+expr, a...)
	} else {
		set("status = '" + string(first.Status) + "'") // a status constant
	}
	if first.CountsRetry {
		set("retry_count = retry_count + 1")
	}
	if first.Finishes {
		set("processed_at = CAST(? AS DATETIME(6))", now)
	} else {
		set("processed_at = NULL")
	}
	if first.Reschedules {
		expr, a := perRow(func(r *completion.Row) any { return micros(r.AvailableIn) })
		set("available_at = CAST(? AS DATETIME(6)) + INTERVAL "+expr+" MICROSECOND", append([]any{now}, a...)...)
	}
	if first.SetsError {
		expr, a := perRow(func(r *completion.Row) any { return r.Error })
		set("last_error = "+expr, a...)
	}
	if sql, a := deliveredSets(p, p.OnRow(ids), now); sql != "" {
		set(sql, a...)
	}
	q, err := s.renderComplete("complete.update", fragments{Sets: strings.Join(sets, ", "), IDs: idList(ids)})
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, q, args...)
	return err
}

// insertAttempts writes the plan's attempt rows; replays are the rows whose
// delivery a replayed completion recorded (deliveredReplays). Zero start
// or finish times get the database clock (now, when the completion read
// it).
func (s *Store) insertAttempts(ctx context.Context, tx *sql.Tx, p *completion.Plan, applied, replays map[int64]bool, now time.Time) error {
	at := func(t time.Time) (string, any) {
		switch {
		case !t.IsZero():
			return "?", formatTime(t)
		case !now.IsZero():
			return "?", formatTime(now)
		}
		return "UTC_TIMESTAMP(6)", nil
	}
	var b strings.Builder
	var args []any
	for i, a := range p.Attempts(applied, replays) {
		if i > 0 {
			b.WriteByte(',')
		}
		started, startedArg := at(a.StartedAt)
		finished, finishedArg := at(a.FinishedAt)
		b.WriteString("(?,?,?,?,?,?," + started + "," + finished + ",?,?,?)")
		args = append(args, a.EventID.String(), p.Token, string(a.Kind), a.ID, a.Attempt, p.StoredRelayID)
		for _, t := range []any{startedArg, finishedArg} {
			if t != nil {
				args = append(args, t)
			}
		}
		var msg, traceID any
		if a.HasError {
			msg = a.Error
		}
		if a.TraceID != "" {
			traceID = a.TraceID
		}
		var receipt any
		if a.Receipt != nil {
			receipt = string(a.Receipt)
		}
		args = append(args, msg, traceID, receipt)
	}
	if b.Len() == 0 {
		return nil
	}
	q, err := s.renderComplete("complete.insert_attempts", fragments{Values: b.String()})
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, q, args...)
	return err
}
