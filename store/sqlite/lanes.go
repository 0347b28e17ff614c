package sqlite

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

	"github.com/txoutbox/outbox/store/internal/lanes"
)

// BalanceLanes implements store.Store.
func (s *Store) BalanceLanes(ctx context.Context, relayID string, lease time.Duration) error {
	return s.wrap("balance lanes", s.claimer.Balance(ctx, relayID, lease))
}

// ReleaseLanes implements store.Store.
func (s *Store) ReleaseLanes(ctx context.Context, relayID string) error {
	return s.wrap("release lanes", s.claimer.Release(ctx, relayID))
}

// HeldLanes implements store.Store.
func (s *Store) HeldLanes(relayID string) map[int]int64 { return s.claimer.Held(relayID) }

// leaseTx runs the lane statements in one write transaction. With yield
// it waits for the write lock at most yieldWait, then gives up with
// lanes.ErrBusy: an application transaction that holds the lock for long
// must not stall the relay's balancing.
func (s *Store) leaseTx(ctx context.Context, yield bool, f func(q lanes.Querier) error) error {
	if !yield {
		return s.writeTx(ctx, func(c *sql.Conn, _ string) error { return f(lanes.DB(c)) })
	}
	return s.tryWriteTx(ctx, yieldWait, func(c *sql.Conn) error { return f(lanes.DB(c)) })
}

// claimsOf reads relayID's rows of the claims table.
func (s *Store) claimsOf(ctx context.Context, c *sql.Conn, relayID string) ([]lanes.ClaimRow, error) {
	rows, err := c.QueryContext(ctx, s.q.claimsOf, relayID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []lanes.ClaimRow
	for rows.Next() {
		var (
			cl                  lanes.ClaimRow
			ls, tokens, idsJSON string
		)
		if err := rows.Scan(&cl.Token, &ls, &tokens, &idsJSON); err != nil {
			return nil, err
		}
		if cl.Lanes, err = laneTokens(ls, tokens); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(idsJSON), &cl.IDs); err != nil {
			return nil, fmt.Errorf("claim %s: ids: %w", cl.Token, err)
		}
		out = append(out, cl)
	}
	return out, rows.Err()
}

// laneTokens reads a claim's lanes and their tokens (JSON arrays).
func laneTokens(lanesJSON, tokensJSON string) (map[int]int64, error) {
	var ls []int
	var ts []int64
	if err := json.Unmarshal([]byte(lanesJSON), &ls); err != nil {
		return nil, fmt.Errorf("claim lanes: %w", err)
	}
	if err := json.Unmarshal([]byte(tokensJSON), &ts); err != nil {
		return nil, fmt.Errorf("claim lane tokens: %w", err)
	}
	out := make(map[int]int64, len(ls))
	for i, l := range ls {
		if i < len(ts) {
			out[l] = ts[i]
		}
	}
	return out, nil
}

// heldLanesOf returns, of the lanes of m, those still held under m's token
// with a lease that ends after nowMS + margin, and the earliest end.
func (s *Store) heldLanesOf(ctx context.Context, c *sql.Conn, m map[int]int64, margin int64) (map[int]bool, int64, error) {
	out := map[int]bool{}
	if len(m) == 0 {
		return out, 0, nil
	}
	ls := slices.Sorted(maps.Keys(m))
	lanesJSON, err := json.Marshal(ls)
	if err != nil {
		return nil, 0, err
	}
	rows, err := c.QueryContext(ctx, s.q.laneLeases, string(lanesJSON), margin)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var until int64
	for rows.Next() {
		var (
			lane    int
			token   sql.NullInt64
			leaseMS int64
			live    bool
		)
		if err := rows.Scan(&lane, &token, &leaseMS, &live); err != nil {
			return nil, 0, err
		}
		if live && token.Valid && token.Int64 == m[lane] {
			out[lane] = true
			if until == 0 || leaseMS < until {
				until = leaseMS
			}
		}
	}
	return out, until, rows.Err()
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
