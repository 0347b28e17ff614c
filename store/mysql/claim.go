package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

// aggKey names an aggregate.
type aggKey struct{ typ, id string }

// claimAgg is one aggregate of a claim's window.
type claimAgg struct {
	key       aggKey
	rows      []runRow  // its window rows, in id order
	gap       int64     // its lowest unfinished row neither in the window nor the relay's own, 0 if none
	gapStatus string    // ... and its status
	gapAvail  time.Time // ... and available_at
	gapIsHead bool      // the gap is the aggregate's head
	lastMine  int64     // the last row PROCESSING under one of the relay's own claims, 0 if none
}

// runRow is a row a claim may take.
type runRow struct {
	k     int // index of the aggregate, in order of first appearance in the window
	id    int64
	avail time.Time
	pos   int // position in the aggregate's run, from 1
}

// claimPlan is what a claim decided from its read.
type claimPlan struct {
	candidates []runRow         // the runs from the heads, at most Limit
	block      []int64          // PENDING rows behind a FAILED head -> BLOCKED
	deferTo    map[int64]string // PENDING rows that are due before their head -> the head's available_at
	byAgg      map[int][]runRow // candidates per aggregate, in id order
}

// Claim implements store.Store. It follows the PostgreSQL backend's claimSQL
// in three steps, because MariaDB has neither LATERAL joins nor UPDATE ...
// RETURNING:
//
//  1. the window (windowSQL, no locks): the first Limit due PENDING rows in
//     (available_at, id) order, and the database clock;
//  2. the runs (runsSQL, no locks): per aggregate of the window, its gap,
//     the first unfinished row that is neither in the window nor one of the
//     relay's own in flight (req.Own). Go keeps each aggregate's window rows
//     before the gap: its run from the head. An aggregate whose head lies
//     outside the window holds back: FAILED, its window rows become BLOCKED;
//     PENDING (in backoff, or due after rows that arrived meanwhile), they
//     take the head's available_at, and the head is claimed if it is due.
//     So a claim clears its window of what it cannot take, and other
//     aggregates are reached however many events pile up behind one head.
//     A window row before the aggregate's last own row in flight (given back
//     meanwhile) stops the aggregate: it must go out before that batch;
//  3. one short READ COMMITTED transaction: block and defer those rows;
//     lock the runs' rows by primary key with FOR UPDATE SKIP LOCKED,
//     re-checking that they are PENDING and due; cut each run at its first
//     row that could not be locked, so that two relays never hold parts of
//     one run; move the rest to PROCESSING under the claim token with
//     locked_until = the database clock + Lease.
//
// An idle poll is one statement. Deadlocks and lock wait timeouts rerun
// the claim. The reads take no locks, so a claim never waits for a
// producer's uncommitted rows, and the locking statements go by primary
// key only.
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	c := &store.Claim{Token: uuid.NewString()}
	err := s.retry(ctx, "claim", func() error { return s.claimOnce(ctx, req, c) })
	if err != nil {
		return nil, s.wrap("claim", err)
	}
	return c, nil
}

func (s *Store) claimOnce(ctx context.Context, req store.ClaimRequest, c *store.Claim) error {
	c.Events = nil
	c.DBTime, c.LockedUntil = time.Time{}, time.Time{}
	aggs, now, err := s.claimRead(ctx, req)
	if err != nil || len(aggs) == 0 {
		return err
	}
	plan := planClaim(aggs, req.Limit, now)
	if len(plan.candidates) == 0 && len(plan.block) == 0 && len(plan.deferTo) == 0 {
		return nil
	}
	return s.inTx(ctx, "claim", func(tx *sql.Tx) error {
		c.Events = nil
		if err := s.holdBack(ctx, tx, plan.block, plan.deferTo); err != nil {
			return err
		}
		if len(plan.candidates) == 0 {
			return nil
		}
		ids := make([]int64, len(plan.candidates))
		for i, r := range plan.candidates {
			ids[i] = r.id
		}
		slices.Sort(ids)
		locked, err := s.lockCandidates(ctx, tx, ids, now)
		if err != nil {
			return err
		}
		// Cut each run at its first row that could not be locked (another
		// transaction holds it, or it changed since it was read).
		keep := make([]int64, 0, len(locked))
		for _, run := range plan.byAgg {
			for _, r := range run {
				if _, ok := locked[r.id]; !ok {
					break
				}
				keep = append(keep, r.id)
			}
		}
		if len(keep) == 0 {
			return nil
		}
		slices.Sort(keep)
		update, err := s.q.byIDs("claim_update", keep)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, update,
			c.Token, formatTime(now), micros(req.Lease)); err != nil {
			return err
		}
		for _, id := range keep {
			c.Events = append(c.Events, locked[id])
		}
		c.DBTime, c.LockedUntil = now, now.Add(req.Lease.Truncate(time.Microsecond))
		return nil
	})
}

// parseGap reads runsSQL's "id,status,available_at".
func (a *claimAgg) parseGap(v string) error {
	parts := strings.SplitN(v, ",", 3)
	if len(parts) != 3 {
		return fmt.Errorf("cannot read the gap row %q", v)
	}
	id, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return fmt.Errorf("cannot read the gap row %q: %w", v, err)
	}
	var at nullTime
	if err := at.parse(parts[2]); err != nil {
		return err
	}
	a.gap, a.gapStatus, a.gapAvail = id, parts[1], at.Time
	return nil
}

// windowRow is one row of the claim's window as windowSQL reads it.
type windowRow struct {
	r   runRow
	key aggKey
}

// readWindow reads the claim's window (windowSQL, or edfWindowSQL unless
// the claim is strict FIFO) in the order that ranks its aggregates: the
// first FIFO-slots rows in (available_at, id) order, then the rows with
// the nearest deadlines, then the rest in (available_at, id) order. planClaim
// gives heads to aggregates in that order, so every aggregate of the first
// two parts (at most Limit of them) gets its head claimed.
func (s *Store) readWindow(ctx context.Context, req store.ClaimRequest) ([]windowRow, time.Time, error) {
	fifoSlots, edfSlots := req.FIFOSlots()
	query, err := s.q.window(req.Limit, edfSlots)
	if err != nil {
		return nil, time.Time{}, err
	}
	rows, err := s.db.QueryContext(ctx, query)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer rows.Close()
	var (
		fifo, edf []windowRow
		now       time.Time
	)
	for rows.Next() {
		var (
			w        windowRow
			avail, c nullTime
			part     int
		)
		if err := rows.Scan(&w.r.id, &w.key.typ, &w.key.id, &avail, &c, &part); err != nil {
			return nil, now, err
		}
		if now.IsZero() || c.Time.Before(now) {
			now = c.Time
		}
		w.r.avail = avail.Time
		if part == 0 {
			fifo = append(fifo, w)
		} else {
			edf = append(edf, w)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, now, err
	}
	// The union's parts come in no set order: put each in its own.
	sort.Slice(fifo, func(i, j int) bool {
		if !fifo[i].r.avail.Equal(fifo[j].r.avail) {
			return fifo[i].r.avail.Before(fifo[j].r.avail)
		}
		return fifo[i].r.id < fifo[j].r.id
	})
	if len(edf) == 0 {
		return fifo, now, nil
	}
	head := fifo[:min(fifoSlots, len(fifo))]
	out := make([]windowRow, 0, len(fifo)+len(edf))
	out = append(out, head...)
	seen := make(map[int64]bool, len(fifo))
	for _, w := range fifo {
		seen[w.r.id] = true
	}
	for _, w := range edf { // already in deadline order within its part
		if !seen[w.r.id] {
			out = append(out, w)
		}
	}
	return append(out, fifo[len(head):]...), now, nil
}

// claimRead runs the claim's two reads and groups the window by aggregate,
// in order of first appearance in readWindow's order (the aggregate with
// the oldest due event first).
func (s *Store) claimRead(ctx context.Context, req store.ClaimRequest) ([]claimAgg, time.Time, error) {
	wrows, now, err := s.readWindow(ctx, req)
	if err != nil {
		return nil, now, err
	}
	var (
		aggs   []claimAgg
		seen   = map[aggKey]int{}
		window []int64
		first  []int64
		byHead = map[int64]int{} // first window row -> aggregate
	)
	for _, w := range wrows {
		r, key := w.r, w.key
		k, ok := seen[key]
		if !ok {
			k = len(aggs)
			seen[key] = k
			aggs = append(aggs, claimAgg{key: key})
			first = append(first, r.id)
			byHead[r.id] = k
		}
		r.k = k
		aggs[k].rows = append(aggs[k].rows, r)
		window = append(window, r.id)
	}
	if len(aggs) == 0 {
		return nil, now, nil
	}
	for i := range aggs {
		rs := aggs[i].rows
		sort.Slice(rs, func(a, b int) bool { return rs[a].id < rs[b].id })
	}
	slices.Sort(window)
	query, err := s.q.runs(req.FailedBlocks, window, first, len(req.Own))
	if err != nil {
		return nil, now, err
	}
	var args []any
	// The tokens appear twice: in the gap, then in lm.
	for range 2 {
		for _, t := range req.Own {
			args = append(args, t)
		}
	}
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, now, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id                  int64
			gap                 sql.NullString
			firstMine, lastMine sql.NullInt64
		)
		if err := rows.Scan(&id, &gap, &firstMine, &lastMine); err != nil {
			return nil, now, err
		}
		a := &aggs[byHead[id]]
		a.lastMine = lastMine.Int64
		if gap.Valid {
			if err := a.parseGap(gap.String); err != nil {
				return nil, now, err
			}
			// Every row below the gap is a window row or one of the
			// relay's own: a gap below both is the aggregate's head.
			a.gapIsHead = a.gap < a.rows[0].id && (!firstMine.Valid || a.gap < firstMine.Int64)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, now, err
	}
	return aggs, now, nil
}

// planClaim decides, per aggregate, the run to claim and the rows to block
// or defer.
func planClaim(aggs []claimAgg, limit int, now time.Time) claimPlan {
	p := claimPlan{deferTo: map[int64]string{}, byAgg: map[int][]runRow{}}
	var cands []runRow
	for k := range aggs {
		a := &aggs[k]
		if a.gapIsHead {
			// The head is outside the window and not the relay's own.
			switch {
			case a.gapStatus == string(outbox.StatusFailed):
				for _, r := range a.rows {
					p.block = append(p.block, r.id)
				}
			case a.gapStatus == string(outbox.StatusPending):
				at := formatTime(a.gapAvail)
				for _, r := range a.rows {
					if r.avail.Before(a.gapAvail) {
						p.deferTo[r.id] = at
					}
				}
				// A due head is claimed, unless it was given back while a
				// later batch of the aggregate is still in flight (below).
				if !a.gapAvail.After(now) && a.lastMine == 0 {
					cands = append(cands, runRow{k: k, id: a.gap, avail: a.gapAvail, pos: 1})
				}
			}
			continue
		}
		if a.lastMine != 0 && a.rows[0].id < a.lastMine {
			// A row given back while a later batch of the aggregate is in
			// flight: it must go out before that batch's events, which the
			// relay holds back, so the aggregate stops here for now.
			continue
		}
		for n, r := range a.rows {
			if a.gap != 0 && r.id > a.gap {
				break
			}
			r.pos = n + 1
			cands = append(cands, r)
		}
	}
	// Breadth-first across aggregates (older aggregates first), so that a
	// long run does not take the whole batch; each aggregate keeps a prefix
	// of its run.
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].pos != cands[j].pos {
			return cands[i].pos < cands[j].pos
		}
		return cands[i].k < cands[j].k
	})
	if len(cands) > limit {
		cands = cands[:limit]
	}
	p.candidates = cands
	for _, r := range cands {
		p.byAgg[r.k] = append(p.byAgg[r.k], r)
	}
	for k := range p.byAgg {
		run := p.byAgg[k]
		sort.Slice(run, func(i, j int) bool { return run[i].id < run[j].id })
	}
	slices.Sort(p.block)
	return p
}

// lockCandidates locks the rows of ids that are still PENDING and due, by
// primary key, skipping rows another transaction holds, and reads them.
func (s *Store) lockCandidates(ctx context.Context, tx *sql.Tx, ids []int64, now time.Time) (map[int64]store.Claimed, error) {
	query, err := s.q.byIDs("lock_claim", ids)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, query, formatTime(now))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	locked := make(map[int64]store.Claimed, len(ids))
	for rows.Next() {
		var (
			ev               store.Claimed
			payload, headers []byte
			created, expires nullTime
			seq              sql.NullInt64
		)
		if err := rows.Scan(&ev.ID, &ev.EventID, &ev.AggregateType, &ev.AggregateID, &ev.EventType,
			&payload, &headers, &ev.RetryCount, &created, &expires, &seq); err != nil {
			return nil, err
		}
		ev.AggregateSeq = seq.Int64
		ev.Payload = json.RawMessage(payload)
		ev.Headers = backend.DecodeHeaders(headers)
		ev.Attempt = ev.RetryCount + 1
		ev.CreatedAt = created.Time
		ev.ExpiresAt = expires.Time
		ev.Expired = !ev.ExpiresAt.IsZero() && !ev.ExpiresAt.After(now)
		locked[ev.ID] = ev
	}
	return locked, rows.Err()
}

// holdBack moves PENDING rows behind a FAILED head to BLOCKED and pushes
// PENDING rows behind a head in backoff to the head's available_at, so that
// neither crowds the next claim's window. Both go by primary key and
// re-check the row.
func (s *Store) holdBack(ctx context.Context, tx *sql.Tx, block []int64, deferTo map[int64]string) error {
	if len(block) > 0 {
		q, err := s.q.byIDs("hold_block", block)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	if len(deferTo) > 0 {
		ids := make([]int64, 0, len(deferTo))
		for id := range deferTo {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var cases strings.Builder
		args := make([]any, 0, 2*len(ids))
		for _, id := range ids {
			fmt.Fprintf(&cases, " WHEN %d THEN ?", id)
			args = append(args, deferTo[id])
		}
		args = append(args, args...)
		q, err := s.q.render("hold_defer", fragments{IDs: idList(ids), Cases: cases.String()})
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}
