package lanes

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/dialect"
)

// Backend is the part of a claim written in a backend's own SQL.
type Backend interface {
	// ReadClaim reads a claim's rows in the relay's lanes (see ReadQuery),
	// taking no lock and writing nothing.
	ReadClaim(ctx context.Context, q ReadQuery) (ReadResult, error)
	// CommitClaim records a claim in one transaction: if every lane of
	// c.Fence is still held under its token with at least c.MinLeaseMS of
	// lease left, it writes the plan's housekeeping, inserts the claim's
	// row and returns the claimed events (those still PENDING); otherwise
	// it changes nothing and returns OK false.
	CommitClaim(ctx context.Context, c CommitRequest) (CommitResult, error)
	// Refused reports whether err, from CommitClaim, is the database's
	// own refusal, after which nothing of the claim was committed (rather
	// than no answer: a deadline, a cancellation, a connection lost).
	Refused(err error) bool
}

// LaneRead is one lane of a read.
type LaneRead struct {
	Lane int
	// Token is the relay's lease token of the lane.
	Token int64
	// Cursor: PostgreSQL reads the lane's rows of hold 0 from this id on,
	// Scan of them at most (the other backends read by status).
	Cursor int64
	Scan   int
}

// ReadQuery asks for a claim's rows.
type ReadQuery struct {
	RelayID string
	Lanes   []LaneRead
	// Limit is the batch size; FIFO and Deadline its window's parts
	// (store.ClaimRequest.FIFOSlots).
	Limit, FIFO, Deadline int
	FailedBlocks          bool
	// IDs, when set, is the window instead of the lanes' scans: these rows,
	// where they are PENDING and due in the relay's lanes (a source that
	// learns of new events from the write-ahead log). Their aggregates'
	// runs are read as usual; the read reports no snapshot.
	IDs []int64
	// OwnClaims counts the relay's claims in flight (store.ClaimRequest.Own).
	// A read returns, per aggregate of its window, its first
	// RunLen(aggregates) unfinished rows (PartRun).
	OwnClaims int
}

// RunLen is how many of each aggregate's first unfinished rows a read
// returns when its window names aggregates of them: a fair share of the
// batch, more while the relay's own claims are in flight (their rows are
// stepped over).
func (q ReadQuery) RunLen(aggregates int) int {
	share := (q.Limit + max(aggregates, 1) - 1) / max(aggregates, 1)
	return max(1, share) * (1 + q.OwnClaims)
}

// ClaimRow is a row of the claims table: a batch in flight.
type ClaimRow struct {
	Token string
	// Lanes maps each lane of the claim's events to the lease token it
	// was claimed under: the claim holds a row only while the row's lane
	// is still held under that token.
	Lanes map[int]int64
	IDs   []int64
}

// ReadResult is what a read found.
type ReadResult struct {
	// Now is the database clock.
	Now time.Time
	// Rows: the window (PartFIFO: the first Limit due PENDING rows in
	// (available_at, id) order, or more; PartDeadline: the Deadline due
	// PENDING rows with the nearest expires_at) and the runs of its
	// aggregates (PartRun, each a prefix of the aggregate's unfinished
	// rows in id order).
	Rows []Row
	// Claims are the relay's rows of the claims table.
	Claims []ClaimRow
	// Snapshot (PostgreSQL) is the read's view of the transactions, for
	// the horizon; nil on the backends that read by status.
	Snapshot *Snapshot
	// FirstOpen (PostgreSQL) maps each lane to the first row of hold 0
	// still unfinished from its cursor on, when the read found one.
	FirstOpen map[int]int64
	// Scanned (PostgreSQL) counts the rows of hold 0 read per lane, and
	// ScanEnd is the last id each of those reads reached.
	Scanned map[int]int
	ScanEnd map[int]int64
}

// CommitRequest records a claim.
type CommitRequest struct {
	RelayID, Token string
	// IDs are the rows to claim, in id order; Lanes maps each to its lane.
	IDs   []int64
	Lanes map[int64]int
	// Fence lists the claim's lanes and the tokens they must still be
	// held under.
	Fence map[int]int64
	// MinLeaseMS is the lease that must be left on every lane of Fence.
	MinLeaseMS int64
	// Block and Defer are the plan's housekeeping.
	Block []int64
	Defer map[int64]time.Time
}

// CommitResult is what a commit did.
type CommitResult struct {
	// OK: every lane was held; the claim is recorded.
	OK bool
	// Events are the claimed events, in id order.
	Events []store.Claimed
	// DBTime is the database clock; LeaseUntil the earliest end of the
	// lanes' leases.
	DBTime, LeaseUntil time.Time
}

// Claimer claims events in lanes, for one store: the part of the claim
// that is the same on every backend. It keeps, per relay id, the lanes the
// relay holds.
type Claimer struct {
	b       Backend
	d       dialect.Dialect
	t       store.Tables
	leaseTx LeaseTx
	ensured atomic.Bool
	now     func() time.Time

	// The safety net behind the cursors (behind.go).
	netLog   *slog.Logger
	netEvery time.Duration
	netFound atomic.Int64

	mu     sync.Mutex
	relays map[string]*relayState
}

// NewClaimer returns the claimer of a store whose tables are t.
func NewClaimer(b Backend, d dialect.Dialect, t store.Tables, tx LeaseTx) *Claimer {
	return &Claimer{b: b, d: d, t: t, leaseTx: tx, now: time.Now, relays: map[string]*relayState{}, netEvery: LookBehindInterval}
}

func (c *Claimer) state(relayID string) *relayState {
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := c.relays[relayID]
	if rs == nil {
		rs = newRelayState()
		c.relays[relayID] = rs
	}
	return rs
}

// Claim claims up to req.Limit events in the lanes of req.RelayID (see
// store.Store.Claim): it renews and balances the relay's lanes when due,
// reads, plans (PlanClaim) and records the claim.
func (c *Claimer) Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error) {
	return c.claim(ctx, req, nil)
}

// ClaimIDs claims, of the rows ids, those PENDING and due in the relay's
// lanes that Claim would take: only while every earlier unfinished event
// of their aggregate is claimed in the same call or is the relay's own in
// flight. Rows it does not claim are left as they are. req.Limit bounds
// the batch as for Claim.
func (c *Claimer) ClaimIDs(ctx context.Context, req store.ClaimRequest, ids []int64) (*store.Claim, error) {
	if len(ids) == 0 {
		if err := req.Validate(); err != nil {
			return nil, err
		}
		return &store.Claim{Token: uuid.NewString()}, nil
	}
	return c.claim(ctx, req, ids)
}

func (c *Claimer) claim(ctx context.Context, req store.ClaimRequest, ids []int64) (*store.Claim, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	rs := c.state(req.RelayID)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.applyDone()
	rs.dropAbandoned(c.now(), req.Lease, req.Own)
	claim := &store.Claim{Token: uuid.NewString()}
	for attempt := 0; attempt < 2; attempt++ {
		if rs.balanceDue(c.now(), req.Lease) {
			// A busy database (ErrBusy: only while the relay's lanes
			// were renewed lately, see mayYield) leaves the relay its
			// lanes, and it claims from those.
			if err := c.balance(ctx, rs, req.RelayID, req.Lease); err != nil && !errors.Is(err, ErrBusy) {
				return nil, err
			}
		}
		if len(rs.held) == 0 {
			return claim, nil
		}
		c.lookBehind(ctx, rs)
		done, err := c.claimOnce(ctx, rs, req, ids, claim)
		if err != nil || done {
			return claim, err
		}
		rs.stale = true // a lane went while claiming: balance, then again
	}
	return claim, nil
}

// claimOnce reads, plans and commits; done is false when a lane was lost
// before the commit.
func (c *Claimer) claimOnce(ctx context.Context, rs *relayState, req store.ClaimRequest, ids []int64, claim *store.Claim) (bool, error) {
	fifo, deadline := req.FIFOSlots()
	q := ReadQuery{RelayID: req.RelayID, Limit: req.Limit, FIFO: fifo, Deadline: deadline, FailedBlocks: req.FailedBlocks,
		OwnClaims: len(req.Own), IDs: ids}
	base := max(16, 2*req.Limit/len(rs.held))
	inflight := map[int]int{}
	for _, cl := range rs.inflight {
		for l, ids := range cl.byLane {
			inflight[l] += len(ids)
		}
	}
	for _, l := range sortedLanes(rs.held) {
		if rs.surrender[l] {
			continue // being given up: its batches in flight finish, no new ones
		}
		h := rs.held[l]
		if h.scan < base {
			h.scan = base
		}
		q.Lanes = append(q.Lanes, LaneRead{Lane: l, Token: h.token, Cursor: h.cursor, Scan: min(h.scan, req.Limit) + inflight[l]})
	}
	read, err := c.b.ReadClaim(ctx, q)
	if err != nil {
		return true, err
	}
	claimed, own := c.inFlight(rs, read, req.Own)
	if read.Snapshot != nil {
		c.advance(rs, read, q, base, req.Limit, windowEnd(read, req.Limit, claimed, own))
	}
	in := PlanInput{Now: read.Now, Limit: req.Limit, FIFO: fifo, FailedBlocks: req.FailedBlocks,
		Rows: read.Rows, Claimed: claimed, Own: own}
	if ids != nil {
		in.Only = map[int64]bool{}
		for _, id := range ids {
			in.Only[id] = true
		}
	}
	plan := PlanClaim(in)
	if plan.Empty() {
		return true, nil
	}
	laneOf := map[int64]int{}
	for _, r := range read.Rows {
		laneOf[r.ID] = r.Lane
	}
	fence := map[int]int64{}
	for _, id := range plan.Claim {
		l := laneOf[id]
		fence[l] = rs.held[l].token
	}
	for id := range plan.Defer {
		fence[laneOf[id]] = rs.held[laneOf[id]].token
	}
	for _, id := range plan.Block {
		fence[laneOf[id]] = rs.held[laneOf[id]].token
	}
	res, err := c.b.CommitClaim(ctx, CommitRequest{RelayID: req.RelayID, Token: claim.Token, IDs: plan.Claim, Lanes: laneOf,
		Fence: fence, MinLeaseMS: max(req.Lease.Milliseconds()/2, 1), Block: plan.Block, Defer: plan.Defer})
	if err != nil {
		// Unless the database refused it, the claim may have committed
		// with only its answer lost (the claim's deadline, or the
		// connection, ending while the result was read). A claim the
		// relay does not know of holds its events for as long as their
		// lanes stay under the same tokens, and the relay would renew them
		// for good: the events would never be sent. So the lanes it was
		// fenced by are taken again under new tokens, which ends that
		// claim if it exists (the sweeper then removes it); the relay's
		// claims in flight on those lanes are fenced too, and their
		// events delivered again.
		if !c.b.Refused(err) {
			rs.forget(slices.Collect(maps.Keys(fence)))
		}
		return true, err
	}
	if !res.OK {
		return false, nil
	}
	claim.Events = res.Events
	if len(claim.Events) == 0 {
		return true, nil
	}
	// The read's clock: the earliest database time this claim saw after
	// the relay took its own clock, so that the relay's conversions of
	// deadlines from it err on the early side, by as little as they can.
	claim.DBTime, claim.LockedUntil = read.Now, res.LeaseUntil
	byLane := map[int][]int64{}
	for _, e := range claim.Events {
		byLane[laneOf[e.ID]] = append(byLane[laneOf[e.ID]], e.ID)
	}
	rs.inflight[claim.Token] = &inflightClaim{at: c.now(), byLane: byLane}
	return true, nil
}

// inFlight sorts the rows held by the relay's claims into its own (the
// claims named in own) and the others. A claim holds a row while the row's
// lane is held under the token the claim was made under. A row PROCESSING
// by its status is a claim of the previous schema's: another relay's.
func (c *Claimer) inFlight(rs *relayState, read ReadResult, own []string) (claimed, mine map[int64]bool) {
	claimed, mine = map[int64]bool{}, map[int64]bool{}
	laneOf := map[int64]int{}
	for _, r := range read.Rows {
		laneOf[r.ID] = r.Lane
		if r.Status == outbox.StatusProcessing {
			claimed[r.ID] = true
		}
	}
	for _, cl := range read.Claims {
		isOwn := slices.Contains(own, cl.Token)
		for _, id := range cl.IDs {
			l, ok := laneOf[id]
			if !ok {
				continue
			}
			h := rs.held[l]
			if h == nil || cl.Lanes[l] != h.token {
				continue
			}
			if isOwn {
				mine[id] = true
			} else {
				claimed[id] = true
			}
		}
	}
	return claimed, mine
}

// advance moves the cursors of the read's lanes (PostgreSQL): to the first
// unfinished row of hold 0 the read found, but never past the horizon;
// and sizes each lane's next read.
func (c *Claimer) advance(rs *relayState, read ReadResult, q ReadQuery, base, limit int, window int64) {
	settled, ok := rs.horizon.Observe(*read.Snapshot)
	for _, lr := range q.Lanes {
		h := rs.held[lr.Lane]
		if h == nil {
			continue
		}
		if h.cursor > read.Snapshot.LastID+1 {
			// The sequence went back (the table was truncated with
			// RESTART IDENTITY): every id is new again.
			h.cursor, h.stored = 0, 0
			rs.horizon.Reset()
			continue
		}
		if ok {
			next := settled + 1
			if first, found := read.FirstOpen[lr.Lane]; found && first < next {
				next = first
			}
			if next > h.cursor {
				h.cursor = next
			}
		}
	}
	// The next read of a lane takes enough of its rows to reach the end of
	// this read's window: a lane whose read stopped before it (its rows
	// are dense there) reads twice as many, one that reached far beyond it
	// half as many, within [base, limit]. So a batch is the window's rows,
	// in id order across the lanes, whatever the spread of aggregates over
	// lanes, and a read takes little more than it can claim.
	for _, lr := range q.Lanes {
		h := rs.held[lr.Lane]
		if h == nil {
			continue
		}
		n, end := read.Scanned[lr.Lane], read.ScanEnd[lr.Lane]
		switch {
		case n == 0:
			h.scan = base
		case n >= lr.Scan && end < window:
			h.scan = min(2*max(h.scan, base), limit)
		case n >= lr.Scan && end > 2*window && window > 0:
			h.scan = max(base, h.scan/2)
		}
	}
}

// windowEnd returns the last id of a read's window: the limit-th of its
// FIFO rows no claim holds, in id order (or the last of them).
func windowEnd(read ReadResult, limit int, claimed, own map[int64]bool) int64 {
	var ids []int64
	for _, r := range read.Rows {
		if r.Part == PartFIFO && !claimed[r.ID] && !own[r.ID] {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return 0
	}
	slices.Sort(ids)
	return ids[min(limit, len(ids))-1]
}

// Completed forgets the rows ids of claim token: they are no longer in
// flight for the relay. It does not wait for a claim in progress.
func (c *Claimer) Completed(relayID, token string, ids []int64) {
	rs := c.state(relayID)
	rs.doneMu.Lock()
	rs.done = append(rs.done, completion{token: token, ids: slices.Clone(ids)})
	rs.doneMu.Unlock()
}
