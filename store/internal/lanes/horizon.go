package lanes

// Snapshot is what a PostgreSQL claim read reports of the transactions
// around it: the outbox id sequence's last value (LastID), then a
// transaction id the read took for itself after that (Xid), and then the
// xmin of its snapshot (the oldest transaction still running), 64-bit.
type Snapshot struct {
	LastID    int64
	Xid, Xmin uint64
	// Unordered: the id sequence may hand out ids out of the order of the
	// transactions that draw them (a CACHE above 1, or counting down), so
	// LastID bounds nothing and the horizon settles no id.
	Unordered bool
}

// Horizon tells up to which id every outbox row is settled: committed and
// visible, or rolled back for good. A lane's cursor may pass only settled
// ids, or a row whose transaction drew a lower id but committed after a
// higher one would be skipped.
//
// A producer's transaction draws its row id after it has a transaction id
// (the insert trigger writes the aggregate's row first), and transaction
// ids are handed out in increasing order. So the ids up to the sequence
// value read before the read took its own transaction id were drawn by
// transactions with lower ids; once a later snapshot's xmin is above the
// read's id, all of them (and the read) have ended, and those ids are
// settled. (A snapshot's xmax is no bound: it is the last completed id
// plus one, and a transaction with a higher id may be running.) A
// long-running write transaction anywhere on the server holds the horizon
// back: the cursor then stays, and each claim reads the delivered rows
// after it again (slower, never wrong).
type Horizon struct {
	pending []horizonStep
	settled int64
	known   bool
	last    int64 // the highest LastID observed
}

type horizonStep struct {
	last int64
	xid  uint64
}

// Observe takes one read's snapshot and returns the settled bound: every
// id at most that is settled. ok is false until a bound is known.
func (h *Horizon) Observe(s Snapshot) (settled int64, ok bool) {
	if s.Unordered {
		// With a sequence cache, a session draws ids from a block it took
		// earlier, below LastID, long after this read: nothing is settled
		// (the cursors stay, each read walks the rows after them again),
		// and what was settled before may name ids still to be drawn.
		h.Reset()
		return 0, false
	}
	if s.LastID < h.last {
		// The sequence went back (TRUNCATE ... RESTART IDENTITY): what
		// was settled names ids that are drawn again.
		h.Reset()
	}
	h.last = s.LastID
	i := 0
	for ; i < len(h.pending) && h.pending[i].xid < s.Xmin; i++ {
		if !h.known || h.pending[i].last > h.settled {
			h.settled = h.pending[i].last
		}
		h.known = true
	}
	h.pending = append(h.pending[i:], horizonStep{last: s.LastID, xid: s.Xid})
	// Under a long transaction the steps pile up: keep the newest ones,
	// since a step settles every older one with it.
	if len(h.pending) > 64 {
		h.pending = append(h.pending[:0], h.pending[len(h.pending)-64:]...)
	}
	return h.settled, h.known
}

// Reset forgets everything (after the sequence was restarted).
func (h *Horizon) Reset() { *h = Horizon{} }
