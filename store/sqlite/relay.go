package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/pages"
)

// Claim implements store.Store with the rules of the PostgreSQL backend's
// claim (see planClaim). It runs in one BEGIN IMMEDIATE transaction:
// SQLite's single write lock plays the part of PostgreSQL's row locks, so a
// concurrent claim waits for this one (briefly) instead of skipping its rows.
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	token := uuid.NewString()
	c := &store.Claim{Token: token}

	// An idle poll reads, and leaves the write lock to the producers.
	var due bool
	if err := retryBusy(ctx, func() error {
		return s.db.QueryRowContext(ctx, s.q.due).Scan(&due)
	}); err != nil {
		return nil, s.wrap("claim", err)
	}
	if !due {
		return c, nil
	}

	err := s.writeTx(ctx, func(conn *sql.Conn, now string) error {
		c.Events = nil
		c.DBTime, c.LockedUntil = time.Time{}, time.Time{}
		plan, err := s.planClaim(ctx, conn, now, req)
		if err != nil {
			return err
		}
		for _, ids := range plan.deferTo {
			if _, err := conn.ExecContext(ctx, s.q.claimDefer, ids.json(), ids.availableAt); err != nil {
				return err
			}
		}
		if len(plan.block) > 0 {
			if _, err := conn.ExecContext(ctx, s.q.claimBlock, int64sJSON(plan.block)); err != nil {
				return err
			}
		}
		ids := plan.claim
		if len(ids) == 0 {
			return nil
		}
		var lockedUntil string
		if err := conn.QueryRowContext(ctx, s.q.lockedUntil, now, modifier(req.Lease)).Scan(&lockedUntil); err != nil {
			return err
		}
		rows, err := conn.QueryContext(ctx, s.q.claimUpdate, now, token, lockedUntil, int64sJSON(ids))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				ev                 store.Claimed
				payload, headers   string
				createdAt          string
				expiresAt          sql.NullString
				retryCount, expInt int64
				seq                sql.NullInt64
			)
			if err := rows.Scan(&ev.ID, &ev.EventID, &ev.AggregateType, &ev.AggregateID, &ev.EventType,
				&payload, &headers, &retryCount, &createdAt, &expiresAt, &expInt, &seq); err != nil {
				return err
			}
			ev.AggregateSeq = seq.Int64
			ev.Payload = json.RawMessage(payload)
			ev.Headers = backend.DecodeHeaders([]byte(headers))
			ev.RetryCount = int(retryCount)
			ev.Attempt = ev.RetryCount + 1
			ev.Expired = expInt != 0
			if ev.CreatedAt, err = parseTime(createdAt); err != nil {
				return err
			}
			if ev.ExpiresAt, err = parseNullTime(expiresAt); err != nil {
				return err
			}
			c.Events = append(c.Events, ev)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(c.Events) == 0 {
			return nil
		}
		if c.DBTime, err = parseTime(now); err != nil {
			return err
		}
		c.LockedUntil, err = parseTime(lockedUntil)
		return err
	})
	if err != nil {
		return nil, s.wrap("claim", err)
	}
	sort.Slice(c.Events, func(i, j int) bool { return c.Events[i].ID < c.Events[j].ID })
	return c, nil
}

// runRow is one row of claimRunsSQL: one of the first unfinished rows of an
// aggregate with due work.
type runRow struct {
	aggType, aggID, firstDue string
	prio                     int // 0: the aggregate is in the window's FIFO share or its deadline part
	id                       int64
	status, availableAt      string
	ok                       bool // PENDING and due
}

// deferRows are rows behind a head in backoff, to move to its available_at.
type deferRows struct {
	ids         []int64
	availableAt string
}

func (d deferRows) json() string { return int64sJSON(d.ids) }

// claimPlan is what one claim does.
type claimPlan struct {
	claim   []int64 // rows to claim, in id order
	deferTo []deferRows
	block   []int64
}

// planClaim reads the aggregates with due work and their first rows
// (claimRunsSQL) and decides, as claimSQL of the PostgreSQL backend does:
// per aggregate, the run from the head while rows are PENDING and due (pos
// is the position in the run); the runs' rows in (pos, first_due, id) order
// up to limit, so that every aggregate's head comes before any second row;
// and, for a head that is not claimable, what it holds back: the rows behind
// a head in backoff take its available_at, the rows behind a FAILED head
// become BLOCKED, so that neither crowds the next window.
func (s *Store) planClaim(ctx context.Context, conn *sql.Conn, now string, req store.ClaimRequest) (claimPlan, error) {
	var plan claimPlan
	limit := req.Limit
	fifo, edf := req.FIFOSlots()
	window, err := s.claimWindow(ctx, conn, now, limit, edf)
	if err != nil {
		return plan, err
	}
	rows, err := conn.QueryContext(ctx, s.q.claimRuns, now, limit, req.FailedBlocks, fifo, edf)
	if err != nil {
		return plan, err
	}
	var rs []runRow
	for rows.Next() {
		var r runRow
		if err := rows.Scan(&r.aggType, &r.aggID, &r.firstDue, &r.prio, &r.id, &r.status, &r.availableAt, &r.ok); err != nil {
			rows.Close()
			return plan, err
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return plan, err
	}
	type candidate struct {
		pos, prio int
		firstDue  string
		id        int64
	}
	var cands []candidate
	for start := 0; start < len(rs); {
		end := start + 1
		for end < len(rs) && rs[end].aggType == rs[start].aggType && rs[end].aggID == rs[start].aggID {
			end++
		}
		run := rs[start:end] // one aggregate, in id order
		for pos, r := range run {
			if !r.ok {
				break
			}
			cands = append(cands, candidate{pos: pos + 1, prio: r.prio, firstDue: r.firstDue, id: r.id})
		}
		head := run[0]
		// The window's rows of a held aggregate (all PENDING and due) are
		// cleared with the run's, so that however many pile up behind the
		// head, the next window reaches other aggregates.
		inWindow := window[aggregateKey{head.aggType, head.aggID}]
		switch {
		case head.status == string(outbox.StatusPending) && !head.ok:
			d := deferRows{availableAt: head.availableAt, ids: inWindow}
			for _, r := range run[1:] {
				if r.status == string(outbox.StatusPending) && r.availableAt < head.availableAt {
					d.ids = append(d.ids, r.id)
				}
			}
			if len(d.ids) > 0 {
				plan.deferTo = append(plan.deferTo, d)
			}
		case head.status == string(outbox.StatusFailed):
			plan.block = append(plan.block, inWindow...)
			for _, r := range run[1:] {
				if r.status == string(outbox.StatusPending) {
					plan.block = append(plan.block, r.id)
				}
			}
		}
		start = end
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.pos != b.pos {
			return a.pos < b.pos
		}
		if a.prio != b.prio {
			return a.prio < b.prio
		}
		if a.firstDue != b.firstDue {
			return a.firstDue < b.firstDue
		}
		return a.id < b.id
	})
	if len(cands) > limit {
		cands = cands[:limit]
	}
	for _, c := range cands {
		plan.claim = append(plan.claim, c.id)
	}
	sort.Slice(plan.claim, func(i, j int) bool { return plan.claim[i] < plan.claim[j] })
	return plan, nil
}

type aggregateKey struct{ aggType, aggID string }

// claimWindow returns the window's row ids by aggregate.
func (s *Store) claimWindow(ctx context.Context, conn *sql.Conn, now string, limit, edf int) (map[aggregateKey][]int64, error) {
	rows, err := conn.QueryContext(ctx, s.q.claimWindow, now, limit, edf)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[aggregateKey][]int64{}
	for rows.Next() {
		var id int64
		var k aggregateKey
		if err := rows.Scan(&id, &k.aggType, &k.aggID); err != nil {
			return nil, err
		}
		out[k] = append(out[k], id)
	}
	return out, rows.Err()
}

// int64sJSON renders ids as a JSON array, for json_each.
func int64sJSON(ids []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// Sweep implements store.Store. Each page is one short BEGIN IMMEDIATE
// transaction, so producers get the write lock between pages.
func (s *Store) Sweep(ctx context.Context, req store.SweepRequest) (store.SweepResult, error) {
	req = req.Normalize()
	return pages.Sweep(req, s.wrap, func(step pages.SweepStep) (int64, error) {
		var n int64
		err := s.writeTx(ctx, func(c *sql.Conn, now string) error {
			var err error
			switch step {
			case pages.SweepReap:
				n, err = s.reapPage(ctx, c, now, req.Limit, req.RelayID)
			case pages.SweepExpire:
				n, err = s.expirePage(ctx, c, now, req.Limit, req.RelayID)
			case pages.SweepBlock:
				n, err = execCount(ctx, c, s.q.block, req.Limit)
			case pages.SweepUnblock:
				n, err = execCount(ctx, c, s.q.unblock, req.Limit, req.FailedBlocks)
			}
			return err
		})
		return n, err
	})
}

func execCount(ctx context.Context, c *sql.Conn, query string, args ...any) (int64, error) {
	r, err := c.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// reapPage returns one page of PROCESSING rows whose lease ended to PENDING,
// keeping retry_count, and audits each with the claim token it had.
func (s *Store) reapPage(ctx context.Context, c *sql.Conn, now string, limit int, relay string) (int64, error) {
	type reaped struct {
		id, retries int64
		eventID     string
		token       sql.NullString
		lockedUntil string
	}
	rows, err := c.QueryContext(ctx, s.q.reapSelect, now, limit)
	if err != nil {
		return 0, err
	}
	var rs []reaped
	for rows.Next() {
		var r reaped
		if err := rows.Scan(&r.id, &r.eventID, &r.token, &r.retries, &r.lockedUntil); err != nil {
			rows.Close()
			return 0, err
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(rs) == 0 {
		return 0, err
	}
	ids := make([]int64, len(rs))
	for i, r := range rs {
		ids[i] = r.id
	}
	n, err := execCount(ctx, c, s.q.reapUpdate, int64sJSON(ids))
	if err != nil {
		return 0, err
	}
	for _, r := range rs {
		token := r.token.String
		if !r.token.Valid || token == "" {
			token = uuid.NewString()
		}
		msg := "lease ended at " + r.lockedUntil + " without a result; returned to PENDING"
		if _, err := c.ExecContext(ctx, s.q.audit, r.eventID, token, string(store.LeaseExpired), r.id,
			r.retries+1, relay, now, msg); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// CountMovable implements store.Store.
func (s *Store) CountMovable(ctx context.Context, failedBlocks bool) (int64, error) {
	var n int64
	err := retryBusy(ctx, func() error {
		return s.db.QueryRowContext(ctx, s.q.countMovable, failedBlocks).Scan(&n)
	})
	if err != nil {
		return 0, s.wrap("count movable events", err)
	}
	return n, nil
}
