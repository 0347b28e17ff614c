package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
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
// transaction (one InnoDB read view), the row sets of SQLite's
// claimReadSQL:
//
//	the relay's claims in flight (claims_of), whose rows (busy) are left
//	     out of the window;
//	f:   the window, the first Limit due PENDING rows of the relay's lanes
//	     in (available_at, id) order: per lane, its first rows from the
//	     lane index (LaneRead.Scan of them), merged; or, when the relay
//	     holds every lane, the first Limit rows of the due index;
//	e:   the Deadline due PENDING rows of the lanes with the nearest
//	     deadlines (the expiry index);
//	the clock, in the same statement;
//
// then, for the aggregates of f and e (w), each one's first
// q.RunLen(len(w)) unfinished rows in id order (FAILED counts when
// FailedBlocks), one index range per aggregate: MariaDB has no LATERAL
// join, and a join on the aggregate index would read each aggregate's
// whole backlog. A run row of a lane the relay does not hold (its
// aggregate's lane cannot change, but an adopted table's collation may
// spell one aggregate two ways) reads as PROCESSING: it holds the run
// back, and nothing is claimed outside the relay's lanes.
func (b claimBackend) ReadClaim(ctx context.Context, q lanes.ReadQuery) (lanes.ReadResult, error) {
	s := b.s
	var res lanes.ReadResult
	if q.IDs != nil {
		return res, fmt.Errorf("%w: MySQL has no source that claims events by id", outbox.ErrInvalidConfig)
	}
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
	rows, err := tx.QueryContext(ctx, s.windowSQL(q, busy))
	if err != nil {
		return res, err
	}
	var aggs []aggKey
	seen := map[aggKey]bool{}
	window := map[int64]lanes.Row{}
	for rows.Next() {
		r, clock, err := scanClaimRow(rows)
		if err != nil {
			rows.Close()
			return res, err
		}
		if clock != nil {
			res.Now = *clock
			continue
		}
		res.Rows = append(res.Rows, r)
		window[r.ID] = r
		if k := (aggKey{r.Agg.Type, r.Agg.ID}); !seen[k] {
			seen[k] = true
			aggs = append(aggs, k)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}
	if len(aggs) > 0 {
		runs, err := s.readRuns(ctx, tx, q, aggs, window)
		if err != nil {
			return res, err
		}
		res.Rows = append(res.Rows, runs...)
	}
	return res, tx.Commit()
}

// readRuns reads the runs of aggs: their ids from the aggregate index alone
// (the window's rows, read already, are most of them), then the other rows
// by primary key.
func (s *Store) readRuns(ctx context.Context, tx *sql.Tx, q lanes.ReadQuery, aggs []aggKey, window map[int64]lanes.Row) ([]lanes.Row, error) {
	query, args := s.runsSQL(q, aggs)
	ids, err := queryIDs(ctx, tx, query, args...)
	if err != nil {
		return nil, err
	}
	var missing []int64
	for _, id := range ids {
		if _, ok := window[id]; !ok {
			missing = append(missing, id)
		}
	}
	fetched := map[int64]lanes.Row{}
	if len(missing) > 0 {
		slices.Sort(missing)
		query, err := s.q.byIDs("claim_run_rows", slices.Compact(missing))
		if err != nil {
			return nil, err
		}
		rows, err := tx.QueryContext(ctx, query)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			r, _, err := scanClaimRow(rows)
			if err != nil {
				rows.Close()
				return nil, err
			}
			fetched[r.ID] = r
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	held := make(map[int]bool, len(q.Lanes))
	for _, l := range q.Lanes {
		held[l.Lane] = true
	}
	out := make([]lanes.Row, 0, len(ids))
	for _, id := range ids {
		r, ok := window[id]
		if !ok {
			if r, ok = fetched[id]; !ok {
				continue
			}
		}
		r.Part = lanes.PartRun
		if !held[r.Lane] {
			r.Status = outbox.StatusProcessing
		}
		out = append(out, r)
	}
	return out, nil
}

// windowSQL renders the window's statement (f, e and the clock) for q; busy
// are the ids of the relay's claims in flight. Every fragment is an
// integer formatted here.
func (s *Store) windowSQL(q lanes.ReadQuery, busy []int64) string {
	var notBusy string
	if len(busy) > 0 {
		notBusy = " AND id NOT IN (" + idList(busy) + ")"
	}
	var b strings.Builder
	b.WriteString("(SELECT 0, id, lane, aggregate_type, aggregate_id, status, available_at FROM (")
	if len(q.Lanes) == lanes.Count {
		b.WriteString(s.q.claimAllHead + notBusy + " ORDER BY available_at, id LIMIT " + strconv.Itoa(q.Limit) + ")")
	} else {
		for i, l := range q.Lanes {
			if i > 0 {
				b.WriteString(" UNION ALL ")
			}
			b.WriteString(s.q.claimLaneHead + strconv.Itoa(l.Lane) + notBusy + " ORDER BY available_at, id LIMIT " +
				strconv.Itoa(max(l.Scan, 1)) + ")")
		}
	}
	b.WriteString(") f ORDER BY available_at, id LIMIT " + strconv.Itoa(q.Limit) + ")")
	if q.Deadline > 0 {
		ls := make([]int64, len(q.Lanes))
		for i, l := range q.Lanes {
			ls[i] = int64(l.Lane)
		}
		b.WriteString(" UNION ALL " + s.q.claimDeadlineHead + idList(ls) + ")" + notBusy +
			" ORDER BY waiting_expires_at, id LIMIT " + strconv.Itoa(q.Deadline) + ")")
	}
	b.WriteString(" UNION ALL SELECT 9, 0, NULL, '', '', '', UTC_TIMESTAMP(6)")
	return b.String()
}

// runsSQL renders the runs' statement for the aggregates aggs: one part
// per aggregate, its keys as placeholders. It reads ids only: from the
// aggregate index alone, but for the status when FAILED does not count.
func (s *Store) runsSQL(q lanes.ReadQuery, aggs []aggKey) (string, []any) {
	tail := " ORDER BY id LIMIT " + strconv.Itoa(q.RunLen(len(aggs))) + ")"
	if !q.FailedBlocks {
		tail = " AND status <> 'FAILED'" + tail
	}
	var b strings.Builder
	b.Grow(len(aggs) * (len(s.q.claimRunHead) + len(tail) + 11))
	args := make([]any, 0, 2*len(aggs))
	for i, k := range aggs {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString(s.q.claimRunHead + tail)
		args = append(args, k.typ, k.id)
	}
	return b.String(), args
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
	default:
		r.Part = lanes.PartRun
	}
	return r, nil, nil
}
