package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/pages"
)

// Sweep implements store.Store. Each page is one short transaction that
// locks with SKIP LOCKED, so the sweeper never waits on a row a relay or a
// producer holds. The reap ends the claims whose lanes are all gone, then
// returns the rows PROCESSING under a lease of the schema before lanes
// whose lease ended; expiring and blocking leave the rows a claim holds
// alone.
func (s *Store) Sweep(ctx context.Context, req store.SweepRequest) (store.SweepResult, error) {
	req = req.Normalize()
	return pages.Sweep(req, s.wrap, func(step pages.SweepStep) (int64, error) {
		var n int64
		err := s.inTx(ctx, "sweep: "+step.String(), func(tx *sql.Tx) error {
			var err error
			switch step {
			case pages.SweepReap:
				var dead int64
				if dead, err = s.reapClaims(ctx, tx, req.Limit, req.RelayID); err == nil {
					n, err = s.reapPage(ctx, tx, req.Limit, req.RelayID)
					n += dead
				}
			case pages.SweepExpire:
				n, err = s.expirePage(ctx, tx, req.Limit, req.RelayID)
			case pages.SweepBlock:
				n, err = s.movePage(ctx, tx, s.q.blockCandidates, []any{req.Limit}, outbox.StatusPending, outbox.StatusBlocked)
			case pages.SweepUnblock:
				n, err = s.movePage(ctx, tx, s.q.unblockCandidates, []any{req.FailedBlocks, req.Limit}, outbox.StatusBlocked, outbox.StatusPending)
			}
			return err
		})
		return n, err
	})
}

// reapClaims ends up to limit claims whose lanes are all gone (their
// relay's lease ended, or another relay took them): each of their rows
// (those the claim's relay did not complete) is audited LEASE_EXPIRED
// under the claim's token, whatever became of it since (the lane's new
// holder may have delivered it already), and the claim's row is deleted.
// Their events are PENDING as they were; the lanes' new holders deliver
// them. A lease that ended is never renewed (the lane is taken again under
// a new token), so a claim found dead stays dead. It returns the rows
// audited.
func (s *Store) reapClaims(ctx context.Context, tx *sql.Tx, limit int, relay string) (int64, error) {
	// The claims first, then the lanes: each statement of this READ
	// COMMITTED transaction sees what was committed when it ran, so a claim
	// read first is checked against lanes read after it, and a lane's token
	// never comes back once it changed. Read the other way round, a claim
	// committed between the two reads on a lane taken meanwhile would be
	// checked against the lanes as they were before it, found dead, and its
	// events delivered again.
	type claimLanes struct {
		token string
		lanes map[int]int64
	}
	var claims []claimLanes
	rows, err := tx.QueryContext(ctx, s.q.allClaims)
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		var (
			token      string
			ls, tokens []byte
		)
		if err := rows.Scan(&token, &ls, &tokens); err != nil {
			rows.Close()
			return 0, err
		}
		m, err := laneTokens(token, ls, tokens)
		if err != nil {
			rows.Close()
			return 0, err
		}
		claims = append(claims, claimLanes{token, m})
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(claims) == 0 {
		return 0, err
	}
	if s.betweenReapReads != nil {
		s.betweenReapReads()
	}
	live := map[int]int64{}
	rows, err = tx.QueryContext(ctx, s.q.allLanes)
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		var lane int
		var token int64
		if err := rows.Scan(&lane, &token); err != nil {
			rows.Close()
			return 0, err
		}
		live[lane] = token
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var dead []any
	for _, c := range claims {
		alive := false
		for l, t := range c.lanes {
			if lt, ok := live[l]; ok && lt == t {
				alive = true
				break
			}
		}
		if !alive && len(dead) < limit {
			dead = append(dead, c.token)
		}
	}
	if len(dead) == 0 {
		return 0, nil
	}
	marks := fragments{Marks: "?" + strings.Repeat(",?", len(dead)-1)}
	lock, err := s.q.render("sweep.dead_claims", marks)
	if err != nil {
		return 0, err
	}
	rows, err = tx.QueryContext(ctx, lock, dead...)
	if err != nil {
		return 0, err
	}
	var (
		locked  []any
		tokenOf = map[int64][]string{}
		ids     []int64
	)
	for rows.Next() {
		var (
			token   string
			idsJSON []byte
			cids    []int64
		)
		if err := rows.Scan(&token, &idsJSON); err != nil {
			rows.Close()
			return 0, err
		}
		if err := json.Unmarshal(idsJSON, &cids); err != nil {
			rows.Close()
			return 0, fmt.Errorf("claim %s: ids: %w", token, err)
		}
		locked = append(locked, token)
		for _, id := range cids {
			if tokenOf[id] == nil {
				ids = append(ids, id)
			}
			tokenOf[id] = append(tokenOf[id], token)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(locked) == 0 {
		return 0, err
	}
	var values []attemptRow
	if len(ids) > 0 {
		slices.Sort(ids)
		q, err := s.q.byIDs("sweep.dead_claim_rows", ids)
		if err != nil {
			return 0, err
		}
		rows, err := tx.QueryContext(ctx, q)
		if err != nil {
			return 0, err
		}
		var now nullTime
		for rows.Next() {
			var (
				id      int64
				eventID outbox.EventID
				retries int
			)
			if err := rows.Scan(&id, &eventID, &retries, &now); err != nil {
				rows.Close()
				return 0, err
			}
			for _, token := range tokenOf[id] {
				values = append(values, attemptRow{eventID, token, store.LeaseExpired, id, retries + 1, relay, now.Time,
					"the lease of its lane ended without a result; returned to PENDING"})
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, err
		}
	}
	if len(values) > 0 {
		if err := s.audit(ctx, tx, values); err != nil {
			return 0, err
		}
	}
	del, err := s.q.render("sweep.dead_claims_delete", fragments{Marks: "?" + strings.Repeat(",?", len(locked)-1)})
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, del, locked...); err != nil {
		return 0, err
	}
	return int64(len(values)), nil
}

// reapPage returns one page of rows PROCESSING under a lease of the schema
// before lanes whose lease ended to PENDING, keeping retry_count, and
// audits each with the claim token it had.
func (s *Store) reapPage(ctx context.Context, tx *sql.Tx, limit int, relay string) (int64, error) {
	type reaped struct {
		id          int64
		eventID     outbox.EventID
		token       sql.NullString
		retries     int
		lockedUntil nullTime
	}
	rows, err := tx.QueryContext(ctx, s.q.reapSelect, limit)
	if err != nil {
		return 0, err
	}
	var (
		rs  []reaped
		now nullTime
	)
	for rows.Next() {
		var r reaped
		if err := rows.Scan(&r.id, &r.eventID, &r.token, &r.retries, &r.lockedUntil, &now); err != nil {
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
	slices.Sort(ids)
	release, err := s.q.byIDs("sweep.release", ids)
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, release)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	values := make([]attemptRow, len(rs))
	for i, r := range rs {
		token := r.token.String
		if !r.token.Valid || token == "" {
			token = uuid.NewString()
		}
		values[i] = attemptRow{r.eventID, token, store.LeaseExpired, r.id, r.retries + 1, relay, now.Time,
			"lease ended at " + rfc3339Millis(r.lockedUntil.Time) + " without a result; returned to PENDING"}
	}
	return n, s.audit(ctx, tx, values)
}

// attemptRow is one audit row written by the sweeper.
type attemptRow struct {
	eventID  outbox.EventID
	token    string
	outcome  store.OutcomeKind
	outboxID int64
	attempt  int
	relay    string
	at       time.Time
	msg      string
}

// audit writes attempt rows; a replay writes nothing twice.
func (s *Store) audit(ctx context.Context, tx *sql.Tx, rows []attemptRow) error {
	var b strings.Builder
	args := make([]any, 0, 9*len(rows))
	for i, r := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,CAST(? AS DATETIME(6)),CAST(? AS DATETIME(6)),?)")
		at := formatTime(r.at)
		args = append(args, r.eventID.String(), r.token, string(r.outcome), r.outboxID, r.attempt,
			textlimit.StorableText(r.relay, textlimit.MaxRelayIDRunes), at, at, r.msg)
	}
	q, err := s.q.render("sweep.insert_attempts", fragments{Values: b.String()})
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, q, args...)
	return err
}

// rfc3339Millis formats t as PostgreSQL's to_char(... 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"').
func rfc3339Millis(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// expirePage ends one page of waiting events past their deadline, with an
// audit row each.
func (s *Store) expirePage(ctx context.Context, tx *sql.Tx, limit int, relay string) (int64, error) {
	type expired struct {
		id        int64
		eventID   outbox.EventID
		retries   int
		expiresAt nullTime
	}
	rows, err := tx.QueryContext(ctx, s.q.expireSelect, limit)
	if err != nil {
		return 0, err
	}
	var (
		es  []expired
		now nullTime
	)
	for rows.Next() {
		var e expired
		if err := rows.Scan(&e.id, &e.eventID, &e.retries, &e.expiresAt, &now); err != nil {
			rows.Close()
			return 0, err
		}
		es = append(es, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(es) == 0 {
		return 0, err
	}
	ids := make([]int64, len(es))
	for i, e := range es {
		ids[i] = e.id
	}
	slices.Sort(ids)
	query, err := s.q.byIDs("sweep.expire_update", ids)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, query, formatTime(now.Time)); err != nil {
		return 0, err
	}
	values := make([]attemptRow, len(es))
	for i, e := range es {
		values[i] = attemptRow{e.eventID, uuid.NewString(), store.Expired, e.id, e.retries + 1, relay, now.Time,
			"expired before delivery: deadline was " + rfc3339Millis(e.expiresAt.Time)}
	}
	if err := s.audit(ctx, tx, values); err != nil {
		return 0, err
	}
	return int64(len(es)), s.compensateExpired(ctx, tx, ids, now.Time, relay)
}

// movePage moves one page of rows from one status to another: the
// candidates query picks them without locks, then they are locked by
// primary key with SKIP LOCKED, re-checking their status, and changed.
func (s *Store) movePage(ctx context.Context, tx *sql.Tx, candidates string, args []any, from, to outbox.Status) (int64, error) {
	ids, err := queryIDs(ctx, tx, candidates, args...)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	slices.Sort(ids)
	lock, err := s.q.byIDs("sweep.lock", ids)
	if err != nil {
		return 0, err
	}
	locked, err := queryIDs(ctx, tx, lock, string(from))
	if err != nil || len(locked) == 0 {
		return 0, err
	}
	move, err := s.q.byIDs("sweep.move", locked)
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, move, string(to))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryIDs(ctx context.Context, q querier, query string, args ...any) ([]int64, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// CountMovable implements store.Store.
func (s *Store) CountMovable(ctx context.Context, failedBlocks bool) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, s.q.countMovable, failedBlocks).Scan(&n); err != nil {
		return 0, s.wrap("count movable events", err)
	}
	return n, nil
}
