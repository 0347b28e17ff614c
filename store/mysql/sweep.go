package mysql

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/pages"
)

// Sweep implements store.Store. Each page is one short transaction that
// locks with SKIP LOCKED, so the sweeper never waits on a row a relay or a
// producer holds.
func (s *Store) Sweep(ctx context.Context, req store.SweepRequest) (store.SweepResult, error) {
	req = req.Normalize()
	return pages.Sweep(req, s.wrap, func(step pages.SweepStep) (int64, error) {
		var n int64
		err := s.inTx(ctx, "sweep: "+step.String(), func(tx *sql.Tx) error {
			var err error
			switch step {
			case pages.SweepReap:
				n, err = s.reapPage(ctx, tx, req.Limit, req.RelayID)
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

// reapPage returns one page of PROCESSING rows whose lease ended to
// PENDING, keeping retry_count, and audits each with the claim token it had.
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
	release, err := s.q.byIDs("sweep_release", ids)
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
			store.StorableText(r.relay, store.MaxRelayIDRunes), at, at, r.msg)
	}
	q, err := s.q.render("insert_attempts", fragments{Values: b.String()})
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
	query, err := s.q.byIDs("expire_update", ids)
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
	lock, err := s.q.byIDs("sweep_lock", ids)
	if err != nil {
		return 0, err
	}
	locked, err := queryIDs(ctx, tx, lock, string(from))
	if err != nil || len(locked) == 0 {
		return 0, err
	}
	move, err := s.q.byIDs("sweep_move", locked)
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
