package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store/internal/lanes"
)

// BalanceLanes implements store.Store.
func (s *Store) BalanceLanes(ctx context.Context, relayID string, lease time.Duration) error {
	if err := checkRelayID(relayID); err != nil {
		return err
	}
	return s.wrap("balance lanes", s.claimer.Balance(ctx, relayID, lease))
}

// ReleaseLanes implements store.Store.
func (s *Store) ReleaseLanes(ctx context.Context, relayID string) error {
	if err := checkRelayID(relayID); err != nil {
		return err
	}
	return s.wrap("release lanes", s.claimer.Release(ctx, relayID))
}

// HeldLanes implements store.Store.
func (s *Store) HeldLanes(relayID string) map[int]int64 { return s.claimer.Held(relayID) }

// leaseTx runs the lane statements in one READ COMMITTED transaction,
// again on a deadlock or a lock wait timeout. It never yields: InnoDB's
// writers do not queue for one lock.
func (s *Store) leaseTx(ctx context.Context, _ bool, f func(q lanes.Querier) error) error {
	return s.inTx(ctx, "lane leases", func(tx *sql.Tx) error { return f(lanes.DB(tx)) })
}

// checkRelayID refuses a relay id that the lane, member and claim tables
// cannot hold as it is (VARCHAR(200) of utf8mb4): longer, not UTF-8, or
// with a NUL byte. The id names the relay's lanes, so it may not be cut.
func checkRelayID(id string) error {
	if id == "" || textlimit.StorableText(id, textlimit.MaxRelayIDRunes) == id {
		return nil
	}
	what := fmt.Sprintf("has %d characters", utf8.RuneCountInString(id))
	if !utf8.ValidString(id) || strings.ContainsRune(id, 0) {
		what = "is not valid UTF-8 text without NUL bytes"
	}
	return fmt.Errorf("%w: the relay id %s; on MySQL it must be UTF-8 text of at most %d characters, as it names the lanes the relay holds: choose a shorter --relay-id (relay.Config.RelayID)",
		outbox.ErrInvalidConfig, what, textlimit.MaxRelayIDRunes)
}

// claimsOf reads relayID's rows of the claims table.
func (s *Store) claimsOf(ctx context.Context, q querier, relayID string) ([]lanes.ClaimRow, error) {
	rows, err := q.QueryContext(ctx, s.q.claimsOf, relayID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []lanes.ClaimRow
	for rows.Next() {
		var (
			cl                  lanes.ClaimRow
			ls, tokens, idsJSON []byte
		)
		if err := rows.Scan(&cl.Token, &ls, &tokens, &idsJSON); err != nil {
			return nil, err
		}
		if cl.Lanes, err = laneTokens(cl.Token, ls, tokens); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(idsJSON, &cl.IDs); err != nil {
			return nil, fmt.Errorf("claim %s: ids: %w", cl.Token, err)
		}
		out = append(out, cl)
	}
	return out, rows.Err()
}

// laneTokens reads a claim's lanes and their tokens (JSON arrays).
func laneTokens(token string, lanesJSON, tokensJSON []byte) (map[int]int64, error) {
	var ls []int
	var ts []int64
	if err := json.Unmarshal(lanesJSON, &ls); err != nil {
		return nil, fmt.Errorf("claim %s: lanes: %w", token, err)
	}
	if err := json.Unmarshal(tokensJSON, &ts); err != nil {
		return nil, fmt.Errorf("claim %s: lane tokens: %w", token, err)
	}
	out := make(map[int]int64, len(ls))
	for i, l := range ls {
		if i < len(ts) {
			out[l] = ts[i]
		}
	}
	return out, nil
}

// int64sJSON renders ids as a JSON array.
func int64sJSON(ids []int64) string { return "[" + idList(ids) + "]" }

// heldLanes reads, with a share lock (a balance cannot take them until tx
// ends), which lanes of m are still held under m's token with a lease that
// ends more than margin ms after the database clock, the earliest end of
// those leases, and the database clock.
func (s *Store) heldLanes(ctx context.Context, tx *sql.Tx, m map[int]int64, margin int64) (map[int]bool, int64, time.Time, error) {
	held := map[int]bool{}
	if len(m) == 0 {
		var now nullTime
		err := tx.QueryRowContext(ctx, stmt("lanes.now", s.t)).Scan(&now)
		return held, 0, now.Time, err
	}
	ls := slices.Sorted(maps.Keys(m))
	marks := make([]string, len(ls))
	for i, l := range ls {
		marks[i] = strconv.Itoa(l)
	}
	q, err := s.q.render("lanes.leases", fragments{Marks: strings.Join(marks, ",")})
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	rows, err := tx.QueryContext(ctx, q, margin)
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	defer rows.Close()
	var (
		until int64
		now   nullTime
	)
	for rows.Next() {
		var (
			lane    int
			token   sql.NullInt64
			leaseMS int64
			live    bool
		)
		if err := rows.Scan(&lane, &token, &leaseMS, &live, &now); err != nil {
			return nil, 0, time.Time{}, err
		}
		if live && token.Valid && token.Int64 == m[lane] {
			held[lane] = true
			if until == 0 || leaseMS < until {
				until = leaseMS
			}
		}
	}
	return held, until, now.Time, rows.Err()
}

// holdBack moves PENDING rows behind a FAILED head to BLOCKED and pushes
// PENDING rows behind a head in backoff to the head's available_at, so that
// neither crowds the next claim's window. Both go by primary key and
// re-check the row.
func (s *Store) holdBack(ctx context.Context, tx *sql.Tx, block []int64, deferTo map[int64]string) error {
	if len(block) > 0 {
		q, err := s.q.byIDs("lanes.hold_block", block)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	if len(deferTo) > 0 {
		ids := slices.Sorted(maps.Keys(deferTo))
		var cases strings.Builder
		args := make([]any, 0, 2*len(ids))
		for _, id := range ids {
			fmt.Fprintf(&cases, " WHEN %d THEN ?", id)
			args = append(args, deferTo[id])
		}
		args = append(args, args...)
		q, err := s.q.render("lanes.hold_defer", fragments{IDs: idList(ids), Cases: cases.String()})
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}
