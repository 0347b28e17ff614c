package lanes

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/txoutbox/outbox/store"
)

// Count is the number of lanes of an outbox: every aggregate belongs to
// one lane, and at most Count relays share the work of one outbox.
const Count = 64

// heldLane is a lane a relay holds.
type heldLane struct {
	token  int64 // the lease's fencing token: random, new at each take
	cursor int64 // PostgreSQL: the lane's cursor, in memory
	stored int64 // ... and as last written to the lane's row
	scan   int   // rows the next read takes from the cursor
}

// inflightClaim is a claim of the relay not yet completed.
type inflightClaim struct {
	at     time.Time       // local clock of the claim
	byLane map[int][]int64 // its rows, per lane
}

// relayState is what one relay of this store holds: its lanes, the
// horizon of its reads, and its claims in flight.
type relayState struct {
	mu       sync.Mutex
	held     map[int]*heldLane
	balanced time.Time // local clock of the last balance
	// busySince is the local clock of the first balance that gave way to
	// a busy database since the last one that did not (mayYield).
	busySince time.Time
	stale     bool // a claim found a lane gone: balance before the next
	horizon   Horizon
	// lookedBehind is the local clock of the safety net's last pass,
	// sweptTo where each lane's sweep goes on, and cursorsSeen the
	// cursors each lane had at the passes of the last RecentWindow
	// (behind.go).
	lookedBehind time.Time
	sweptTo      map[int]int64
	cursorsSeen  map[int][]seenCursor
	inflight     map[string]*inflightClaim
	// stuck are the lanes the relay stopped renewing because a batch of
	// theirs outlived its lease: it does not take them again while that
	// batch is in flight (another relay delivers it meanwhile).
	stuck map[int]bool
	// surrender are held lanes the relay is giving up to relays below
	// their share: it claims nothing more from them, and releases them at
	// the first balance that finds none of their batches in flight. Chosen
	// anew at each balance.
	surrender map[int]bool

	// done are the completions not yet taken off inflight: Completed
	// queues them under doneMu alone, so that a completion does not wait
	// for a claim in progress (which holds mu through its round trips);
	// the next claim or balance applies them.
	doneMu sync.Mutex
	done   []completion
}

// completion is a Completed call: rows ids of claim token are done.
type completion struct {
	token string
	ids   []int64
}

// applyDone takes the queued completions off inflight. mu must be held.
func (rs *relayState) applyDone() {
	rs.doneMu.Lock()
	done := rs.done
	rs.done = nil
	rs.doneMu.Unlock()
	for _, d := range done {
		cl := rs.inflight[d.token]
		if cl == nil {
			continue
		}
		ids := make(map[int64]bool, len(d.ids))
		for _, id := range d.ids {
			ids[id] = true
		}
		for l, rows := range cl.byLane {
			rows = slices.DeleteFunc(rows, func(id int64) bool { return ids[id] })
			if len(rows) == 0 {
				delete(cl.byLane, l)
			} else {
				cl.byLane[l] = rows
			}
		}
		if len(cl.byLane) == 0 {
			delete(rs.inflight, d.token)
		}
	}
}

// dropAbandoned forgets the claims older than lease that the relay no
// longer lists as its own (store.ClaimRequest.Own): a relay gives a batch
// up when it cannot record it (the database was down past the lease), and
// never completes it. Kept, such a claim would hold its lanes stuck for
// good: not renewed, and not taken again while "in flight". Its lanes are
// forgotten too, so that the next balance takes them again under new
// tokens: the claim's row in the database then holds nothing, and its
// events are claimed again (renewed under the old tokens, the row would
// keep them from every claim). A claim within its lease is kept whatever
// Own says, so that a caller that sends no Own keeps its lanes while it
// delivers. mu must be held.
func (rs *relayState) dropAbandoned(now time.Time, lease time.Duration, own []string) {
	for token, cl := range rs.inflight {
		if now.Sub(cl.at) <= lease || slices.Contains(own, token) {
			continue
		}
		delete(rs.inflight, token)
		rs.forget(slices.Collect(maps.Keys(cl.byLane)))
	}
}

// forget drops lanes from those the relay holds, so that the next
// balance takes them again under new tokens: that fences every claim made
// under the old ones, those the relay knows of (its claims in flight lose
// the lanes, and their completions are fenced, as when a lane is lost; see
// balance) and one it may not know of. mu must be held.
func (rs *relayState) forget(lanes []int) {
	for _, l := range lanes {
		if rs.held[l] == nil {
			continue
		}
		delete(rs.held, l)
		rs.stale = true
		for _, other := range rs.inflight {
			delete(other.byLane, l)
		}
	}
}

func newRelayState() *relayState {
	return &relayState{held: map[int]*heldLane{}, inflight: map[string]*inflightClaim{}, stuck: map[int]bool{},
		surrender: map[int]bool{}, sweptTo: map[int]int64{}, cursorsSeen: map[int][]seenCursor{}}
}

// tokens returns the tokens of the held lanes.
func (rs *relayState) tokens() map[int]int64 {
	out := make(map[int]int64, len(rs.held))
	for l, h := range rs.held {
		out[l] = h.token
	}
	return out
}

// busyLanes returns the lanes with rows of the relay's claims in flight,
// and those of them whose claim is older than lease.
func (rs *relayState) busyLanes(now time.Time, lease time.Duration) (busy, overdue map[int]bool) {
	busy, overdue = map[int]bool{}, map[int]bool{}
	for _, c := range rs.inflight {
		for l, ids := range c.byLane {
			if len(ids) == 0 {
				continue
			}
			busy[l] = true
			if now.Sub(c.at) > lease {
				overdue[l] = true
			}
		}
	}
	return busy, overdue
}

// balanceEvery is how often a relay renews and balances its lanes.
func balanceEvery(lease time.Duration) time.Duration { return store.LaneBalanceInterval(lease) }

// yieldFor is how long after its last balance a relay's balance may give
// way to a busy database (LeaseTx's yield): one and a half balance
// intervals, so that a balance that gave way is tried again, at the next
// claim or tick, while the lanes still have more than half their lease
// left (what a claim's commit needs).
func yieldFor(lease time.Duration) time.Duration { return balanceEvery(lease) * 3 / 2 }

// mayYield reports whether the relay's balance may give way to a busy
// database, for yieldFor at most: from its last balance while it holds
// lanes, from the first balance that gave way while it holds none. After
// that it waits for the write lock. On a database whose write lock is
// never free for long (a busy producer; many relays sweeping) a balance
// that always gave way would never renew or take a lane, and every relay
// would stop delivering.
func (rs *relayState) mayYield(now time.Time, lease time.Duration) bool {
	since := rs.balanced
	if len(rs.held) == 0 {
		if rs.busySince.IsZero() {
			return true
		}
		since = rs.busySince
	}
	return now.Sub(since) < yieldFor(lease)
}

// balanceDue reports whether the relay should renew and rebalance its
// lanes before claiming: every balanceEvery, and whenever it holds none or
// a claim found one gone.
func (rs *relayState) balanceDue(now time.Time, lease time.Duration) bool {
	return rs.stale || len(rs.held) == 0 || now.Sub(rs.balanced) >= balanceEvery(lease)
}

// LeaseTx runs f in one write transaction of the backend. With yield, a
// backend whose writers queue for one lock (SQLite) may give up at once
// with ErrBusy when another transaction holds it, rather than wait: a
// relay balancing its lanes keeps those it holds and tries again at its
// next claim, so an application's long write transaction does not stall
// it. A balance yields only for a while (mayYield); Release never does.
type LeaseTx func(ctx context.Context, yield bool, f func(q Querier) error) error

// ErrBusy is returned by a yielding LeaseTx that did not get the write
// lock in time.
var ErrBusy = errors.New("lane leases: the database's write lock is held by another transaction")

// balance renews the relay's lanes and moves it towards its fair share,
// in one transaction:
//
//   - The live relays are the members seen within three balance
//     intervals; each should hold Count/live lanes, rounded down or up.
//   - A lane is renewed unless a batch of it has outlived its lease (the
//     relay is stuck on it): that lane is left to expire, and is not
//     taken again by this relay while the batch is in flight.
//   - Above the rounded-up share, a relay gives up lanes with nothing in
//     flight, but only as many as the live relays below the rounded-down
//     share are missing: a lane is never left free with nobody to take it.
//     When too few of its lanes are idle (a busy relay always has batches
//     in flight), it stops claiming from as many busy ones (surrender) and
//     gives them up at a later balance, once their batches are recorded:
//     a relay that joins gets its share within a few balances, however
//     busy the others are.
//   - It takes the lanes whose lease ended (their relay died or got stuck)
//     whatever its share, so that they are delivered again at once, and
//     lanes given up by others up to the rounded-up share.
func (c *Claimer) balance(ctx context.Context, rs *relayState, relayID string, lease time.Duration) error {
	rs.applyDone()
	leaseMS := max(lease.Milliseconds(), 1)
	liveMS := max(3*balanceEvery(lease).Milliseconds(), 1)
	local := c.now()
	busy, overdue := rs.busyLanes(local, lease)
	for l := range rs.stuck {
		if !busy[l] {
			delete(rs.stuck, l)
		}
	}
	var (
		next      map[int]*heldLane
		stuck     map[int]bool
		surrender map[int]bool
		ensured   bool
	)
	err := c.leaseTx(ctx, rs.mayYield(local, lease), func(q Querier) error {
		next, stuck = map[int]*heldLane{}, maps.Clone(rs.stuck)
		var now int64
		if err := queryRow(ctx, q, render(c.d, c.t, "now_ms", names{}), nil, &now); err != nil {
			return err
		}
		if !c.ensured.Load() {
			var n int
			if err := queryRow(ctx, q, render(c.d, c.t, "count", names{}), nil, &n); err != nil {
				return err
			}
			if n < Count {
				if _, err := q.Exec(ctx, render(c.d, c.t, "ensure", names{Values: ensureValues()})); err != nil {
					return err
				}
			}
			ensured = true
		}
		if _, err := q.Exec(ctx, render(c.d, c.t, "member", names{}), relayID, now); err != nil {
			return err
		}
		if err := c.prune(ctx, q, now-100*max(leaseMS, liveMS)); err != nil {
			return err
		}
		hunger, err := c.hunger(ctx, q, now, now-liveMS, relayID)
		if err != nil {
			return err
		}

		rows, err := q.Query(ctx, render(c.d, c.t, "mine", names{}), relayID)
		if err != nil {
			return err
		}
		for rows.Next() {
			var (
				lane   int
				token  *int64
				until  int64
				cursor int64
			)
			if err := rows.Scan(&lane, &token, &until, &cursor); err != nil {
				rows.Close()
				return err
			}
			h := rs.held[lane]
			if h == nil || token == nil || h.token != *token || until <= now {
				continue
			}
			if overdue[lane] {
				stuck[lane] = true
				continue
			}
			kept := *h
			kept.stored = max(kept.stored, cursor)
			kept.cursor = max(kept.cursor, cursor)
			next[lane] = &kept
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}

		surrender = map[int]bool{}
		if surplus := len(next) - hunger.high; surplus > 0 && hunger.missing > 0 {
			want := min(surplus, hunger.missing)
			// The lanes being surrendered go first, then the others
			// from the highest.
			lanes := sortedLanes(next)
			slices.Reverse(lanes)
			candidates := slices.Concat(
				slices.DeleteFunc(slices.Clone(lanes), func(l int) bool { return !rs.surrender[l] }),
				slices.DeleteFunc(lanes, func(l int) bool { return rs.surrender[l] }))
			var release []int
			for _, l := range candidates {
				if len(release) == want {
					break
				}
				if !busy[l] {
					release = append(release, l)
				}
			}
			for _, l := range candidates {
				if len(release)+len(surrender) == want {
					break
				}
				if busy[l] {
					surrender[l] = true
				}
			}
			if len(release) > 0 {
				cursors := map[int]int64{}
				for _, l := range release {
					cursors[l] = next[l].cursor
					delete(next, l)
				}
				if _, err := q.Exec(ctx, render(c.d, c.t, "release", names{Cursors: cursorCase(cursors), LaneList: laneList(release)}),
					relayID); err != nil {
					return err
				}
			}
		}
		if len(next) > 0 {
			cursors := map[int]int64{}
			for l, h := range next {
				if h.cursor > h.stored {
					cursors[l] = h.cursor
				}
			}
			if _, err := q.Exec(ctx, render(c.d, c.t, "renew", names{Cursors: cursorCase(cursors), LaneList: laneList(sortedLanes(next))}),
				now+leaseMS, relayID); err != nil {
				return err
			}
			for _, h := range next {
				h.stored = max(h.stored, h.cursor)
			}
		}
		free, err := c.freeLanes(ctx, q, now, relayID, Count)
		if err != nil {
			return err
		}
		for _, f := range free {
			if _, ok := next[f.lane]; ok || stuck[f.lane] {
				continue
			}
			if f.released && len(next) >= hunger.high {
				continue
			}
			token := newToken()
			n, err := q.Exec(ctx, render(c.d, c.t, "take", names{}), relayID, token, now+leaseMS, f.lane, now, relayID)
			if err != nil {
				return err
			}
			if n == 1 {
				next[f.lane] = &heldLane{token: token, cursor: f.cursor, stored: f.cursor}
			}
		}
		return nil
	})
	if errors.Is(err, ErrBusy) {
		if rs.busySince.IsZero() {
			rs.busySince = local
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("lane leases: %w", err)
	}
	if ensured {
		c.ensured.Store(true)
	}
	// Lanes the relay no longer holds take their claims with them: those
	// rows are another relay's now (or free), and its completions of them
	// are fenced. A stuck lane keeps its claim, so that it is not taken
	// again before that batch is recorded.
	for l := range rs.held {
		if next[l] == nil && !stuck[l] {
			for _, cl := range rs.inflight {
				delete(cl.byLane, l)
			}
		}
	}
	for l, h := range next {
		if old := rs.held[l]; old != nil && old.token == h.token {
			h.scan = old.scan
		}
	}
	rs.held, rs.stuck, rs.surrender = next, stuck, surrender
	rs.balanced = c.now()
	rs.busySince = time.Time{}
	rs.stale = false
	return nil
}

// Balance renews and balances relayID's lanes now (see balance).
func (c *Claimer) Balance(ctx context.Context, relayID string, lease time.Duration) error {
	if lease <= 0 {
		return fmt.Errorf("lane leases: the lease must be positive, got %s", lease)
	}
	rs := c.state(relayID)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if err := c.balance(ctx, rs, relayID, lease); err != nil && !errors.Is(err, ErrBusy) {
		return err
	}
	// Busy: the lanes held are kept; their leases are renewed at the next
	// balance, and a claim's commit checks them (MinLease) meanwhile.
	return nil
}

// Release gives up every lane relayID holds in this store and removes it
// from the members, so that the other relays take its lanes at once
// rather than when its leases end. A relay calls it when it stops, after
// its last batch is recorded.
func (c *Claimer) Release(ctx context.Context, relayID string) error {
	rs := c.state(relayID)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	err := c.leaseTx(ctx, false, func(q Querier) error {
		if len(rs.held) > 0 {
			cursors := map[int]int64{}
			for l, h := range rs.held {
				cursors[l] = h.cursor
			}
			if _, err := q.Exec(ctx, render(c.d, c.t, "release", names{Cursors: cursorCase(cursors), LaneList: laneList(sortedLanes(rs.held))}),
				relayID); err != nil {
				return err
			}
		}
		_, err := q.Exec(ctx, render(c.d, c.t, "leave", names{}), relayID)
		return err
	})
	if err != nil {
		return fmt.Errorf("release lanes: %w", err)
	}
	rs.held = map[int]*heldLane{}
	rs.inflight = map[string]*inflightClaim{}
	rs.stuck = map[int]bool{}
	rs.doneMu.Lock()
	rs.done = nil
	rs.doneMu.Unlock()
	return nil
}

// Held returns the lanes relayID holds in this store, with their tokens.
func (c *Claimer) Held(relayID string) map[int]int64 {
	rs := c.state(relayID)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.tokens()
}

// Cursors returns the cursor of each lane relayID holds: the id below
// which its claims no longer read (0: from the lane's start).
func (c *Claimer) Cursors(relayID string) map[int]int64 {
	rs := c.state(relayID)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make(map[int]int64, len(rs.held))
	for l, h := range rs.held {
		out[l] = h.cursor
	}
	return out
}

func sortedLanes[V any](m map[int]V) []int {
	return slices.Sorted(maps.Keys(m))
}

// Tables returns the names of the lane tables of t.
func Tables(t store.Tables) (lanes, members string) { return LaneTable(t), MemberTable(t) }

// newToken returns a fencing token: 63 random bits, never 0.
func newToken() int64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic(err) // crypto/rand never fails on the platforms Go supports
		}
		if t := int64(binary.LittleEndian.Uint64(b[:]) >> 1); t != 0 {
			return t
		}
	}
}
