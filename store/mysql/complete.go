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

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// appliedRow is a row of a completion that its claim still held.
type appliedRow struct {
	id  int64
	agg aggKey
}

// Complete implements store.Store: the fenced state change, dead letters,
// BLOCKED and pushed-back followers and the attempt rows, in one READ
// COMMITTED transaction (completeSQL of the PostgreSQL backend does it in
// one statement):
//
//  1. the fence: lock the claim's row (its token, req.Token) and, with a
//     share lock, the rows of its lanes, which a balance then cannot take
//     until this commits; a row may change only while it is PENDING, one
//     of the claim's ids, in a lane still held under the token the claim
//     was made under. Without the claim's row (its lanes all ended and
//     the sweeper reaped it, or a claim of the schema before lanes)
//     nothing changes;
//  2. lock those rows by primary key, in id order, and apply one UPDATE
//     per kind of outcome present (usually one: DELIVERED);
//  3. dead letters for the new FAILED rows;
//  4. the waiting PENDING rows of aggregates with a new FAILED row (when
//     FAILED blocks) become BLOCKED, and those behind a retried row take its
//     new available_at, but for the rows a claim holds: found by a read
//     that takes no locks, then changed by primary key, so that a
//     producer's uncommitted rows are never waited for;
//  5. the attempt rows, with INSERT IGNORE on their key (event, token,
//     outcome), so that a replay after an ambiguous commit writes nothing
//     twice; a fenced outcome is audited too, as a lost lease;
//  6. the completed rows leave the claim's row, which goes when none is
//     left (a claim whose lanes all ended is left to the sweeper).
//
// A batch that is all DELIVERED, the common case, first tries a shorter
// transaction: the fence, the guarded UPDATE of all its rows, the attempt
// rows and the claim's row. If the UPDATE did not change every row, that
// transaction is rolled back and the general one above runs.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	if len(req.Outcomes) == 0 {
		return store.CompleteResult{}, nil
	}
	byID := make(map[int64]*store.Outcome, len(req.Outcomes))
	ids := make([]int64, 0, len(req.Outcomes))
	for i := range req.Outcomes {
		o := &req.Outcomes[i]
		if _, dup := byID[o.ID]; !dup {
			byID[o.ID] = o
			ids = append(ids, o.ID)
		}
	}
	slices.Sort(ids)
	applied := make(map[int64]bool, len(ids))
	var err error
	done := false
	if allDelivered(req.Outcomes, len(ids)) {
		err = s.inTx(ctx, "complete", func(tx *sql.Tx) error {
			clear(applied)
			f, err := s.claimFence(ctx, tx, req.Token)
			if err != nil {
				return err
			}
			return s.completeDelivered(ctx, tx, req, ids, f, applied)
		})
		done = err == nil
		if errors.Is(err, errSomeFenced) {
			err = nil
		}
	}
	if !done && err == nil {
		err = s.inTx(ctx, "complete", func(tx *sql.Tx) error {
			clear(applied)
			f, err := s.claimFence(ctx, tx, req.Token)
			if err != nil {
				return err
			}
			return s.completeAny(ctx, tx, req, ids, byID, f, applied)
		})
	}
	if err != nil {
		return store.CompleteResult{}, s.wrap("complete", refusedData(err))
	}
	s.claimer.Completed(req.RelayID, req.Token, ids)
	return backend.NewCompleteResult(req.Outcomes, applied), nil
}

// allDelivered reports whether every outcome is DELIVERED, each row once.
func allDelivered(outs []store.Outcome, unique int) bool {
	if len(outs) != unique {
		return false
	}
	for i := range outs {
		if outs[i].Kind != store.Delivered {
			return false
		}
	}
	return true
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
	err := tx.QueryRowContext(ctx, s.q.claimRow, token).Scan(&ls, &ts, &idsJSON)
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

// dropFromClaim takes the rows of outs out of the claim's row, and deletes
// the row when none is left. A claim whose lanes are all gone is left to
// the sweeper, which audits its rows.
func (s *Store) dropFromClaim(ctx context.Context, tx *sql.Tx, token string, f claimFence, outs []store.Outcome) error {
	if !f.live() {
		return nil
	}
	done := make(map[int64]bool, len(outs))
	for _, o := range outs {
		done[o.ID] = true
	}
	left := slices.DeleteFunc(slices.Clone(f.all), func(id int64) bool { return done[id] })
	if len(left) == len(f.all) {
		return nil
	}
	if len(left) == 0 {
		_, err := tx.ExecContext(ctx, s.q.claimDelete, token)
		return err
	}
	_, err := tx.ExecContext(ctx, s.q.claimIDs, int64sJSON(left), token)
	return err
}

// completeDelivered is the common case, a batch all delivered, in a few
// statements: the fence, one guarded UPDATE, the attempt rows and the
// claim's row. If the UPDATE did not change every row (some were fenced),
// it returns errSomeFenced and the transaction is rolled back, for
// completeAny to sort the rows out.
func (s *Store) completeDelivered(ctx context.Context, tx *sql.Tx, req store.CompleteRequest, ids []int64, f claimFence, applied map[int64]bool) error {
	if !f.live() {
		return errSomeFenced
	}
	for _, id := range ids {
		if !f.ids[id] {
			return errSomeFenced
		}
	}
	sets, args := deliveredSets(req, onRowOutcomes(req.Outcomes), "")
	if len(sets) > 0 {
		sets = ", " + sets
	}
	q, err := s.q.render("complete_delivered", fragments{IDs: idList(ids), Sets: sets, Marks: f.laneList()})
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
	if err := s.insertAttempts(ctx, tx, req, applied, nil, time.Time{}); err != nil {
		return err
	}
	return s.dropFromClaim(ctx, tx, req.Token, f, req.Outcomes)
}

// completeAny handles any mix of outcomes and fenced rows.
func (s *Store) completeAny(ctx context.Context, tx *sql.Tx, req store.CompleteRequest, ids []int64,
	byID map[int64]*store.Outcome, f claimFence, applied map[int64]bool) error {
	var mine []appliedRow
	eligible := slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return !f.ids[id] })
	if f.live() && len(eligible) > 0 {
		query, err := s.q.render("complete_lock", fragments{IDs: idList(eligible), Marks: f.laneList()})
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, query)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r appliedRow
			if err := rows.Scan(&r.id, &r.agg.typ, &r.agg.id); err != nil {
				rows.Close()
				return err
			}
			mine = append(mine, r)
			applied[r.id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	now := f.now
	if len(mine) > 0 {
		if err := s.applyOutcomes(ctx, tx, req, mine, byID, now); err != nil {
			return err
		}
	}
	replays, err := s.deliveredReplays(ctx, tx, req, applied)
	if err != nil {
		return err
	}
	if err := s.insertAttempts(ctx, tx, req, applied, replays, now); err != nil {
		return err
	}
	var expired []int64
	for _, r := range mine {
		if byID[r.id].Kind == store.Expired {
			expired = append(expired, r.id)
		}
	}
	if err := s.compensateExpired(ctx, tx, expired, now, req.RelayID); err != nil {
		return err
	}
	return s.dropFromClaim(ctx, tx, req.Token, f, req.Outcomes)
}

// follow is the first retried row of an aggregate in a completion and the
// latest available_at its retries got.
type follow struct {
	id          int64
	availableAt time.Time
}

// applyOutcomes changes the rows of mine (locked, ours) as their outcomes
// say, writes the dead letters, and holds back the aggregates' waiting rows.
func (s *Store) applyOutcomes(ctx context.Context, tx *sql.Tx, req store.CompleteRequest, mine []appliedRow,
	byID map[int64]*store.Outcome, now time.Time) error {
	byKind := map[store.OutcomeKind][]int64{}
	var kinds []store.OutcomeKind
	changed := make([]int64, len(mine))
	var (
		failed      []int64
		failedHeads = map[aggKey]int64{}
		failedOrder []aggKey
		retried     = map[aggKey]*follow{}
		retryOrder  []aggKey
	)
	for i, r := range mine {
		o := byID[r.id]
		if _, seen := byKind[o.Kind]; !seen {
			kinds = append(kinds, o.Kind)
		}
		byKind[o.Kind] = append(byKind[o.Kind], r.id)
		changed[i] = r.id
		switch o.Kind {
		case store.Failed:
			failed = append(failed, r.id)
			if _, seen := failedHeads[r.agg]; !seen {
				failedHeads[r.agg] = r.id
				failedOrder = append(failedOrder, r.agg)
			}
		case store.Retry:
			at := now.Add(max(o.RetryIn, 0).Truncate(time.Microsecond))
			if f := retried[r.agg]; f == nil {
				retried[r.agg] = &follow{id: r.id, availableAt: at}
				retryOrder = append(retryOrder, r.agg)
			} else if at.After(f.availableAt) {
				f.availableAt = at
			}
		}
	}
	nowText := formatTime(now)
	for _, kind := range kinds {
		if err := s.updateKind(ctx, tx, req, kind, byKind[kind], byID, nowText); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		var reasons strings.Builder
		args := make([]any, 0, len(failed)+1)
		for _, id := range failed {
			reason := textlimit.ErrorText(byID[id].Error)
			if reason == "" {
				reason = "failed"
			}
			fmt.Fprintf(&reasons, " WHEN %d THEN ?", id)
			args = append(args, reason)
		}
		args = append(args, nowText)
		q, err := s.q.render("dead_letter_insert", fragments{IDs: idList(failed), Cases: reasons.String()})
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	if !req.FailedBlocks {
		failedOrder = nil
	}
	if len(failedOrder) == 0 && len(retryOrder) == 0 {
		return nil
	}
	// The waiting rows of those aggregates, read without locks (a
	// producer's uncommitted rows are not waited for), excluding the rows
	// this completion changed: PostgreSQL's single statement does not see
	// them as PENDING either.
	var cond strings.Builder
	var args []any
	for _, k := range failedOrder {
		if cond.Len() > 0 {
			cond.WriteString(" OR ")
		}
		cond.WriteString("(aggregate_type = ? AND aggregate_id = ? AND unfinished = 1 AND id > ?)")
		args = append(args, k.typ, k.id, failedHeads[k])
	}
	for _, k := range retryOrder {
		if cond.Len() > 0 {
			cond.WriteString(" OR ")
		}
		cond.WriteString("(aggregate_type = ? AND aggregate_id = ? AND unfinished = 1 AND id > ?)")
		args = append(args, k.typ, k.id, retried[k].id)
	}
	q, err := s.q.render("behind_retried", fragments{Cond: cond.String(), IDs: idList(changed)})
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
		if head, ok := failedHeads[k]; ok && req.FailedBlocks && id > head {
			block = append(block, id)
		}
		if f := retried[k]; f != nil && id > f.id && avail.Time.Before(f.availableAt) {
			deferTo[id] = formatTime(f.availableAt)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	slices.Sort(block)
	return s.holdBack(ctx, tx, block, deferTo)
}

// updateKind applies one kind of outcome to its rows, which complete_lock
// locked, by primary key. Values that differ per row are CASE id
// expressions.
func (s *Store) updateKind(ctx context.Context, tx *sql.Tx, req store.CompleteRequest, kind store.OutcomeKind, ids []int64,
	byID map[int64]*store.Outcome, now string) error {
	var (
		sets []string
		args []any
	)
	set := func(clause string, a ...any) {
		sets = append(sets, clause)
		args = append(args, a...)
	}
	perRow := func(value func(o *store.Outcome) any) (string, []any) {
		var b strings.Builder
		a := make([]any, 0, len(ids))
		b.WriteString("CASE id")
		for _, id := range ids {
			fmt.Fprintf(&b, " WHEN %d THEN ?", id)
			a = append(a, value(byID[id]))
		}
		b.WriteString(" END")
		return b.String(), a
	}
	lastError := func() {
		expr, a := perRow(func(o *store.Outcome) any { return textlimit.ErrorText(o.Error) })
		set("last_error = "+expr, a...)
	}
	retryAt := func() {
		expr, a := perRow(func(o *store.Outcome) any { return micros(max(o.RetryIn, 0)) })
		set("available_at = CAST(? AS DATETIME(6)) + INTERVAL "+expr+" MICROSECOND", append([]any{now}, a...)...)
	}
	switch kind {
	case store.Delivered:
		set("status = 'PROCESSED'")
		set("processed_at = CAST(? AS DATETIME(6))", now)
		var outs []*store.Outcome
		for _, id := range ids {
			if backend.DeliveredOnRow(byID[id]) {
				outs = append(outs, byID[id])
			}
		}
		if sets, a := deliveredSets(req, outs, now); sets != "" {
			set(sets, a...)
		}
	case store.Expired:
		set("status = 'EXPIRED'")
		set("processed_at = CAST(? AS DATETIME(6))", now)
		lastError()
	case store.Failed:
		set("status = 'FAILED'")
		set("retry_count = retry_count + 1")
		set("processed_at = CAST(? AS DATETIME(6))", now)
		lastError()
	case store.Retry:
		set("status = 'PENDING'")
		set("retry_count = retry_count + 1")
		set("processed_at = NULL")
		retryAt()
		lastError()
	case store.Released:
		expr, a := perRow(func(o *store.Outcome) any {
			if o.Block {
				return string(outbox.StatusBlocked)
			}
			return string(outbox.StatusPending)
		})
		set("status = "+expr, a...)
		set("processed_at = NULL")
		retryAt()
	default:
		return fmt.Errorf("unknown outcome kind %q for event %d", kind, ids[0])
	}
	q, err := s.q.render("complete_update", fragments{Sets: strings.Join(sets, ", "), IDs: idList(ids)})
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, q, args...)
	return err
}

// insertAttempts writes one attempt row per attempted outcome that is not
// recorded on its row (backend.DeliveredOnRow: applied, or a replay of one applied before);
// a fenced one says that the lease was lost. Zero start or finish times
// get the database clock (now, when the completion read it).
func (s *Store) insertAttempts(ctx context.Context, tx *sql.Tx, req store.CompleteRequest, applied, replays map[int64]bool, now time.Time) error {
	at := func(t time.Time) (string, any) {
		switch {
		case !t.IsZero():
			return "?", formatTime(t)
		case !now.IsZero():
			return "?", formatTime(now)
		}
		return "UTC_TIMESTAMP(6)", nil
	}
	// The first outcome of each row is the one a completion applies; a
	// second delivery of a row recorded on it writes nothing either (as
	// the attempt row's key would have it).
	first := make(map[int64]*store.Outcome, len(req.Outcomes))
	for i := range req.Outcomes {
		if o := &req.Outcomes[i]; first[o.ID] == nil {
			first[o.ID] = o
		}
	}
	var b strings.Builder
	var args []any
	n := 0
	for i := range req.Outcomes {
		o := &req.Outcomes[i]
		if !o.Attempted || backend.DeliveredOnRow(o) && (replays[o.ID] || applied[o.ID] && backend.DeliveredOnRow(first[o.ID])) {
			continue
		}
		var msg any
		switch {
		case applied[o.ID]:
			if m := textlimit.ErrorText(o.Error); m != "" {
				msg = m
			}
		case o.Error != "":
			msg = textlimit.ErrorText(o.Error) + "; " + backend.LeaseLost
		default:
			msg = backend.LeaseLost
		}
		if n > 0 {
			b.WriteByte(',')
		}
		started, startedArg := at(o.StartedAt)
		finished, finishedArg := at(o.FinishedAt)
		b.WriteString("(?,?,?,?,?,?," + started + "," + finished + ",?,?)")
		args = append(args, o.EventID.String(), req.Token, string(o.Kind), o.ID, o.Attempt, textlimit.StorableText(req.RelayID, textlimit.MaxRelayIDRunes))
		for _, a := range []any{startedArg, finishedArg} {
			if a != nil {
				args = append(args, a)
			}
		}
		var traceID any
		if o.TraceID != "" {
			traceID = o.TraceID
		}
		args = append(args, msg, traceID)
		n++
	}
	if n == 0 {
		return nil
	}
	q, err := s.q.render("insert_traced_attempts", fragments{Values: b.String()})
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, q, args...)
	return err
}
