package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

// The lanes' cursors and what guards them: the id order check (at migrate
// and at the relay's start) and the safety net behind the cursors (see
// store/internal/lanes/behind.go).

// looseRowsPerPass bounds the rows without a lane one pass repairs.
const looseRowsPerPass = 1000

// ScanBehind implements lanes.BehindScanner.
func (b claimBackend) ScanBehind(ctx context.Context, scans []lanes.BehindScan) (lanes.BehindResult, error) {
	res := lanes.BehindResult{SweepEnd: map[int]int64{}}
	ls := make([]int32, len(scans))
	curs := make([]int64, len(scans))
	froms := make([]int64, len(scans))
	recents := make([]int64, len(scans))
	for i, s := range scans {
		ls[i], curs[i], froms[i], recents[i] = int32(s.Lane), s.Cursor, s.SweepFrom, s.RecentFrom
	}
	rows, err := b.s.pool.Query(ctx, b.s.q.scanBehind, ls, curs, froms, lanes.RecentRows, lanes.SweepRows, looseRowsPerPass, recents)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			part, lane int32
			id         int64
			eventID    string
		)
		if err := rows.Scan(&part, &lane, &id, &eventID); err != nil {
			return res, err
		}
		if part == 1 {
			res.SweepEnd[int(lane)] = id
			continue
		}
		res.Passed = append(res.Passed, lanes.PassedRow{Lane: int(lane), ID: id, EventID: eventID})
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	rows.Close()
	if err := b.s.checkIDOrder(ctx, true); errors.Is(err, outbox.ErrInvalidConfig) {
		res.Problem = err
	}
	return res, nil
}

// CheckIDOrder returns an error that says what to change when the outbox's
// ids may be drawn out of the order of their transactions: a sequence with
// a CACHE above 1 (sessions then draw from blocks they took earlier), one
// that counts down or cycles, or the insert trigger that draws them
// disabled. The lanes' cursors would pass such ids for good; the relay
// refuses to start on this error (store.CursorGuard).
func (s *Store) CheckIDOrder(ctx context.Context) error {
	return s.wrap("check id order", s.checkIDOrder(ctx, true))
}

// checkIDOrder is CheckIDOrder; withTrigger also checks the insert trigger
// (which migrate creates: before it, only the sequence is checked).
func (s *Store) checkIDOrder(ctx context.Context, withTrigger bool) error {
	var (
		seq               string
		cache, increment  int64
		cycle             bool
		triggerEnabledFor string
	)
	err := s.pool.QueryRow(ctx, s.q.idOrder).Scan(&seq, &cache, &increment, &cycle, &triggerEnabledFor)
	if errors.Is(err, pgx.ErrNoRows) {
		if withTrigger {
			return fmt.Errorf("%w: table %q has no id sequence (its id must be an identity or serial column): run `outbox migrate`",
				outbox.ErrInvalidConfig, s.t.Outbox)
		}
		return nil
	}
	if err != nil {
		return err
	}
	var problems []string
	if cache > 1 {
		problems = append(problems, fmt.Sprintf("sequence %s has CACHE %d: each session then draws ids from a block it took earlier, "+
			"out of the order of the transactions, and the relay could pass committed events by; run: ALTER SEQUENCE %s CACHE 1", seq, cache, seq))
	}
	if increment <= 0 {
		problems = append(problems, fmt.Sprintf("sequence %s counts down (INCREMENT %d); run: ALTER SEQUENCE %s INCREMENT 1", seq, increment, seq))
	}
	if cycle {
		problems = append(problems, fmt.Sprintf("sequence %s cycles (ids would start again below the relay's cursors); run: ALTER SEQUENCE %s NO CYCLE", seq, seq))
	}
	if withTrigger {
		switch triggerEnabledFor {
		case "O", "A": // fires (origin and local sessions; always)
		case "":
			problems = append(problems, fmt.Sprintf("table %q has no insert trigger %q: run `outbox migrate`", s.t.Outbox, s.t.Outbox+"_before_insert"))
		default:
			problems = append(problems, fmt.Sprintf("the insert trigger %q of table %q is disabled: events written without it have no lane "+
				"and ids out of order; run: ALTER TABLE %q ENABLE TRIGGER %q", s.t.Outbox+"_before_insert", s.t.Outbox, s.t.Outbox, s.t.Outbox+"_before_insert"))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	msg := problems[0]
	for _, p := range problems[1:] {
		msg += "; and " + p
	}
	return fmt.Errorf("%w: %s", outbox.ErrInvalidConfig, msg)
}

// FoundBehindCursors implements store.CursorGuard.
func (s *Store) FoundBehindCursors() int64 { return s.claimer.FoundBehindCursors() }
