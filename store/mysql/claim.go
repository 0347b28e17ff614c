package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

// aggKey names an aggregate.
type aggKey struct{ typ, id string }

// Claim implements store.Store with the lanes' claim (store/internal/lanes),
// as on PostgreSQL and SQLite: the relay renews and balances its lanes when
// due; ReadClaim reads its lanes' due rows without writing an event row or
// taking a lock; the shared planner (lanes.PlanClaim) decides in Go; and
// CommitClaim records the batch as one row of the claims table in a short
// READ COMMITTED transaction that first checks, under a share lock on the
// lane rows, that the lanes are still held with half a lease left. An idle
// poll writes nothing. Deadlocks and lock wait timeouts rerun a commit or a
// balance.
func (s *Store) Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error) {
	if err := checkRelayID(req.RelayID); err != nil {
		return nil, err
	}
	c, err := s.claimer.Claim(ctx, req)
	if err != nil {
		return nil, s.wrap("claim", err)
	}
	return c, nil
}

// claimBackend is the MySQL part of the lanes' claim.
type claimBackend struct{ s *Store }

// ReadClaim implements lanes.Backend in one REPEATABLE READ read-only
// transaction (one InnoDB read view), with the row sets of SQLite's
// claim.read:
//
//	the relay's claims in flight (lanes.claims_of), whose rows (busy) are left
//	     out of the window;
//	f:   the window, the first Limit due PENDING rows of the relay's lanes
//	     in (available_at, id) order: per lane, its first rows from the
//	     lane index (LaneRead.Scan of them), merged; or, when the relay
//	     holds every lane, the first Limit rows of the due index;
//	e:   the Deadline due PENDING rows of the lanes with the nearest
//	     deadlines (the expiry index);
//	the busy rows still unfinished, by primary key, and the clock, in the
//	     same statement;
//
// then, for the aggregates of f and e (w), each one's first
// q.RunLen(len(w)) unfinished rows in id order (FAILED counts when
// FailedBlocks): see readRuns.
func (b claimBackend) ReadClaim(ctx context.Context, q lanes.ReadQuery) (lanes.ReadResult, error) {
	s := b.s
	var res lanes.ReadResult
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return res, err
	}
	defer tx.Rollback()
	if res.Claims, err = s.claimsOf(ctx, tx, q.RelayID); err != nil {
		return res, err
	}
	var busy []int64
	for _, c := range res.Claims {
		busy = append(busy, c.IDs...)
	}
	slices.Sort(busy)
	busy = slices.Compact(busy)
	w, err := s.readWindow(ctx, tx, q, busy)
	if err != nil {
		return res, err
	}
	res.Now = w.now
	rd := runRead{q: q, known: map[int64]lanes.Row{}, byAgg: map[aggKey][]int64{}, first: map[aggKey]int64{}}
	for _, r := range append(w.fifo, w.deadline...) {
		res.Rows = append(res.Rows, r)
		if k := (aggKey{r.Agg.Type, r.Agg.ID}); rd.first[k] == 0 {
			rd.aggs = append(rd.aggs, k)
			rd.first[k] = r.ID
		}
		rd.add(r)
	}
	for _, r := range w.own {
		rd.add(r)
	}
	if len(rd.aggs) > 0 {
		runs, err := s.readRuns(ctx, tx, &rd)
		if err != nil {
			return res, err
		}
		res.Rows = append(res.Rows, runs...)
	}
	return res, tx.Commit()
}

// window is what the window's statement read: f (fifo, the first Limit
// rows in (available_at, id) order), e (deadline), the busy rows still
// unfinished (own) and the database clock.
type window struct {
	fifo, deadline, own []lanes.Row
	now                 time.Time
}

// readWindow reads the window. A relay that holds some lanes reads each
// lane's first LaneRead.Scan due rows and merges them in Go; a lane whose
// rows all made the first Limit may have more among them, so those lanes
// are read again, Limit rows each: f is then exactly the first Limit due
// rows of the lanes, without reading Limit rows of every lane.
func (s *Store) readWindow(ctx context.Context, tx *sql.Tx, q lanes.ReadQuery, busy []int64) (window, error) {
	var w window
	perLane := len(q.Lanes) < lanes.Count && q.IDs == nil
	rows, err := tx.QueryContext(ctx, s.windowSQL(q, busy, perLane))
	if err != nil {
		return w, err
	}
	for rows.Next() {
		r, clock, err := scanClaimRow(rows)
		if err != nil {
			rows.Close()
			return w, err
		}
		switch {
		case clock != nil:
			w.now = *clock
		case r.Part == lanes.PartFIFO:
			w.fifo = append(w.fifo, r)
		case r.Part == lanes.PartDeadline:
			w.deadline = append(w.deadline, r)
		default:
			w.own = append(w.own, r)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return w, err
	}
	if !perLane {
		if q.IDs != nil {
			w.fifo = sortedFirst(w.fifo, len(w.fifo))
		}
		return w, nil
	}
	first := firstRows(w.fifo, q.Limit)
	byLane := map[int]int{}
	lastOf := map[int]lanes.Row{} // each lane's last row read
	for _, r := range w.fifo {
		byLane[r.Lane]++
		if l, ok := lastOf[r.Lane]; !ok || l.AvailableAt.Before(r.AvailableAt) ||
			l.AvailableAt.Equal(r.AvailableAt) && l.ID < r.ID {
			lastOf[r.Lane] = r
		}
	}
	var again []int
	for _, l := range q.Lanes {
		if k := max(l.Scan, 1); k < q.Limit && byLane[l.Lane] >= k && first[lastOf[l.Lane].ID] {
			again = append(again, l.Lane)
		}
	}
	if len(again) == 0 {
		w.fifo = sortedFirst(w.fifo, q.Limit)
		return w, nil
	}
	var b strings.Builder
	for i, l := range again {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString(s.laneSQL(l, busy, q.Limit))
	}
	redo := map[int]bool{}
	for _, l := range again {
		redo[l] = true
	}
	w.fifo = slices.DeleteFunc(w.fifo, func(r lanes.Row) bool { return redo[r.Lane] })
	rows, err = tx.QueryContext(ctx, b.String())
	if err != nil {
		return w, err
	}
	for rows.Next() {
		r, _, err := scanClaimRow(rows)
		if err != nil {
			rows.Close()
			return w, err
		}
		w.fifo = append(w.fifo, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return w, err
	}
	w.fifo = sortedFirst(w.fifo, q.Limit)
	return w, nil
}

// sortedFirst sorts rows in (available_at, id) order and keeps the first
// limit.
func sortedFirst(rows []lanes.Row, limit int) []lanes.Row {
	slices.SortFunc(rows, func(a, b lanes.Row) int {
		if c := a.AvailableAt.Compare(b.AvailableAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return rows[:min(limit, len(rows))]
}

// firstRows returns the ids of the first limit rows in (available_at, id)
// order.
func firstRows(rows []lanes.Row, limit int) map[int64]bool {
	out := map[int64]bool{}
	for _, r := range sortedFirst(slices.Clone(rows), limit) {
		out[r.ID] = true
	}
	return out
}

// laneSQL renders the part of the window that reads lane's first k due
// rows, but for busy ones.
func (s *Store) laneSQL(lane int, busy []int64, k int) string {
	var notBusy string
	if len(busy) > 0 {
		notBusy = " AND id NOT IN (" + idList(busy) + ")"
	}
	return s.q.claimLaneHead + strconv.Itoa(lane) + notBusy + " ORDER BY available_at, id LIMIT " + strconv.Itoa(k) + ")"
}

// windowSQL renders the window's statement for q: f (per lane, its first
// LaneRead.Scan due rows, or the first Limit of every lane), e, the busy
// rows still unfinished and the clock; busy are the ids of the relay's
// claims in flight. Every fragment is an integer formatted here.
func (s *Store) windowSQL(q lanes.ReadQuery, busy []int64, perLane bool) string {
	var notBusy string
	if len(busy) > 0 {
		notBusy = " AND id NOT IN (" + idList(busy) + ")"
	}
	var b strings.Builder
	if q.IDs != nil {
		ls := make([]int64, len(q.Lanes))
		for i, l := range q.Lanes {
			ls[i] = int64(l.Lane)
		}
		b.WriteString(s.q.claimIDsHead + idList(q.IDs) + ") AND lane IN (" + idList(ls) + ")" + notBusy + ")")
		q.Deadline = 0 // the window is the given rows
	} else if perLane {
		for i, l := range q.Lanes {
			if i > 0 {
				b.WriteString(" UNION ALL ")
			}
			b.WriteString(s.laneSQL(l.Lane, busy, max(l.Scan, 1)))
		}
	} else {
		b.WriteString(s.q.claimAllHead + notBusy + " ORDER BY available_at, id LIMIT " + strconv.Itoa(q.Limit) + ")")
	}
	if q.Deadline > 0 {
		ls := make([]int64, len(q.Lanes))
		for i, l := range q.Lanes {
			ls[i] = int64(l.Lane)
		}
		b.WriteString(" UNION ALL " + s.q.claimDeadlineHead + idList(ls) + ")" + notBusy +
			" ORDER BY waiting_expires_at, id LIMIT " + strconv.Itoa(q.Deadline) + ")")
	}
	if len(busy) > 0 {
		b.WriteString(" UNION ALL " + s.q.claimOwnHead + idList(busy) + ")")
		if !q.FailedBlocks {
			b.WriteString(" AND status <> 'FAILED'")
		}
		b.WriteString(")")
	}
	b.WriteString(" UNION ALL " + s.q.claimClock)
	return b.String()
}

// scanClaimRow reads a row of the claim's read: part, id, lane, aggregate,
// status and available_at. The clock row (part 9) returns its time.
func scanClaimRow(rows *sql.Rows) (lanes.Row, *time.Time, error) {
	var (
		r      lanes.Row
		part   int
		lane   sql.NullInt64
		status string
		avail  nullTime
	)
	if err := rows.Scan(&part, &r.ID, &lane, &r.Agg.Type, &r.Agg.ID, &status, &avail); err != nil {
		return r, nil, err
	}
	if part == 9 {
		return r, &avail.Time, nil
	}
	r.Lane, r.Status, r.AvailableAt = int(lane.Int64), outbox.Status(status), avail.Time
	if !lane.Valid {
		r.Lane = -1 // in no lane: a row of a lane nobody holds
	}
	switch part {
	case 0:
		r.Part = lanes.PartFIFO
	case 1:
		r.Part = lanes.PartDeadline
	default: // a busy row, a gap or a run's row
		r.Part = lanes.PartRun
	}
	return r, nil, nil
}

// CommitClaim implements lanes.Backend, in one READ COMMITTED transaction:
// the fence (every lane of the claim still held with MinLeaseMS left,
// under a share lock), the plan's housekeeping, the claimed rows still
// PENDING (under a share lock: an operator's change or the sweeper's waits
// for this transaction, or this one for it and then finds the row
// changed), and the claim's row.
// Refused implements lanes.Backend: the server refused a statement of
// the claim's transaction (or its COMMIT), so it was rolled back.
func (b claimBackend) Refused(err error) bool {
	var me *mysqldrv.MySQLError
	return errors.As(err, &me)
}

func (b claimBackend) CommitClaim(ctx context.Context, cr lanes.CommitRequest) (lanes.CommitResult, error) {
	s := b.s
	var res lanes.CommitResult
	err := s.inTx(ctx, "claim", func(tx *sql.Tx) error {
		res = lanes.CommitResult{}
		held, until, now, err := s.heldLanes(ctx, tx, cr.Fence, cr.MinLeaseMS)
		if err != nil || len(held) < len(cr.Fence) {
			return err
		}
		res.OK, res.LeaseUntil, res.DBTime = true, time.UnixMilli(until).UTC(), now
		deferTo := make(map[int64]string, len(cr.Defer))
		for id, at := range cr.Defer {
			deferTo[id] = formatTime(at)
		}
		if err := s.holdBack(ctx, tx, cr.Block, deferTo); err != nil {
			return err
		}
		if len(cr.IDs) == 0 {
			return nil
		}
		q, err := s.q.byIDs("claim.events", cr.IDs)
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q)
		if err != nil {
			return err
		}
		for rows.Next() {
			ev, err := scanClaimed(rows, now)
			if err != nil {
				rows.Close()
				return err
			}
			res.Events = append(res.Events, ev)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(res.Events) == 0 {
			return err
		}
		slices.SortFunc(res.Events, func(a, b store.Claimed) int { return cmp.Compare(a.ID, b.ID) })
		ids := make([]int64, len(res.Events))
		for i, e := range res.Events {
			ids[i] = e.ID
		}
		ls := slices.Sorted(maps.Keys(cr.Fence))
		ts := make([]int64, len(ls))
		lsInt := make([]int64, len(ls))
		for i, l := range ls {
			ts[i], lsInt[i] = cr.Fence[l], int64(l)
		}
		_, err = tx.ExecContext(ctx, s.q.claimInsert, cr.Token, textlimit.StorableText(cr.RelayID, textlimit.MaxRelayIDRunes),
			int64sJSON(lsInt), int64sJSON(ts), int64sJSON(ids))
		return err
	})
	return res, err
}

// scanClaimed reads a row of claim.events; now is the database clock.
func scanClaimed(rows *sql.Rows, now time.Time) (store.Claimed, error) {
	var (
		ev               store.Claimed
		payload, headers []byte
		created, expires nullTime
		seq              sql.NullInt64
	)
	if err := rows.Scan(&ev.ID, &ev.EventID, &ev.AggregateType, &ev.AggregateID, &ev.EventType,
		&payload, &headers, &ev.RetryCount, &created, &expires, &seq); err != nil {
		return ev, err
	}
	ev.AggregateSeq = seq.Int64
	ev.Payload = json.RawMessage(payload)
	ev.Headers = backend.DecodeHeaders(headers)
	ev.Attempt = ev.RetryCount + 1
	ev.CreatedAt = created.Time
	ev.ExpiresAt = expires.Time
	ev.Expired = !ev.ExpiresAt.IsZero() && !ev.ExpiresAt.After(now)
	return ev, nil
}
