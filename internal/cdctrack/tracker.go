// Package cdctrack is the bookkeeping shared by the change-data-capture
// sources (store/postgres/cdc, store/mysql/binlog): which streamed events
// the relay has not finished, and the stream position that may be saved
// or confirmed. The position moves past a transaction only when each of
// its events is final or handed to the retry path, so a source killed at
// any moment restarts from a position that loses nothing.
package cdctrack

import (
	"sync"
	"time"
)

// Tracker holds what the stream received and the relay has not finished,
// and computes the confirmed position P: it may move past a transaction
// only when each of its events is final or handed to the retry path (its
// row is back in the table's hands: PENDING, BLOCKED or final). Its
// methods are safe for concurrent use.
type Tracker[P any] struct {
	mu sync.Mutex
	// after reports whether position a comes after b.
	after func(a, b P) bool
	// txns are the streamed transactions not yet confirmed, in commit order.
	txns []*txn[P]
	// byID maps each unsettled event (row id) to its transaction.
	byID map[int64]*txn[P]
	// queue holds streamed row ids not yet claimed, in commit order.
	queue []int64
	// inClaim maps row ids to the claim token that holds them.
	inClaim map[int64]string
	// claims maps a claim token to the streamed ids it holds.
	claims map[string][]int64
	// leaseEnd maps a claim token to the end of its lease (local clock):
	// a claim not recorded by then belongs to the reaper, and its events
	// settle (see expire).
	leaseEnd map[string]time.Time
	// invisible counts the looks at streamed ids whose rows were not yet
	// visible.
	invisible map[int64]int
	// open: a transaction has begun on the stream and not yet committed.
	open bool
	// confirmed is the position that may be saved or confirmed.
	confirmed P
}

type txn[P any] struct {
	end     P
	pending int
}

// New returns a tracker confirmed at start; after reports whether one
// position comes after another.
func New[P any](start P, after func(a, b P) bool) *Tracker[P] {
	return &Tracker[P]{
		after:     after,
		byID:      map[int64]*txn[P]{},
		inClaim:   map[int64]string{},
		claims:    map[string][]int64{},
		leaseEnd:  map[string]time.Time{},
		invisible: map[int64]int{},
		confirmed: start,
	}
}

// Reset forgets the streamed but unclaimed state, for a new stream that
// starts again at the confirmed position and will send those
// transactions again. Events held by claims in flight stay known to
// their claims.
func (t *Tracker[P]) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resetLocked()
}

// ResetAt is Reset for a new stream that starts at pos (a saved position)
// instead of the confirmed one.
func (t *Tracker[P]) ResetAt(pos P) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resetLocked()
	t.confirmed = pos
}

func (t *Tracker[P]) resetLocked() {
	t.txns = nil
	t.byID = map[int64]*txn[P]{}
	t.queue = nil
	t.open = false
}

// Begin notes that a transaction started on the stream.
func (t *Tracker[P]) Begin() {
	t.mu.Lock()
	t.open = true
	t.mu.Unlock()
}

// commit adds a transaction that ended at end with the outbox rows ids. Ids
// a claim in flight already holds are not queued again; they settle when
// that claim completes.
func (t *Tracker[P]) Commit(end P, ids []int64) (queued int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.open = false
	if !t.after(end, t.confirmed) {
		return 0 // sent again after a reconnect, already settled
	}
	x := &txn[P]{end: end}
	for _, id := range ids {
		if _, dup := t.byID[id]; dup {
			continue
		}
		x.pending++
		t.byID[id] = x
		if _, held := t.inClaim[id]; !held {
			t.queue = append(t.queue, id)
			queued++
		}
	}
	t.txns = append(t.txns, x)
	t.advance()
	return queued
}

// Take removes up to n ids from the head of the queue.
func (t *Tracker[P]) Take(n int) []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	n = min(n, len(t.queue))
	out := append([]int64(nil), t.queue[:n]...)
	t.queue = t.queue[n:]
	if len(t.queue) == 0 {
		t.queue = nil
	}
	return out
}

// Queued returns how many ids wait to be claimed.
func (t *Tracker[P]) Queued() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue)
}

// PutBack returns ids to the head of the queue (a claim by id failed).
func (t *Tracker[P]) PutBack(ids []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.queue = append(append([]int64(nil), ids...), t.queue...)
}

// Claimed records that token holds ids (those the stream knows of); the
// other ids of offered were not claimable and are settled now: their rows
// stay with the table and the ordinary claim.
func (t *Tracker[P]) Claimed(token string, leaseEnd time.Time, offered []int64, got []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	held := make(map[int64]bool, len(got))
	var mine []int64
	for _, id := range got {
		held[id] = true
		if _, known := t.byID[id]; known {
			mine = append(mine, id)
			t.inClaim[id] = token
		}
	}
	for _, id := range offered {
		delete(t.invisible, id)
		if !held[id] {
			t.settleLocked(id)
		}
	}
	if len(mine) > 0 {
		t.claims[token] = mine
		t.leaseEnd[token] = leaseEnd
	}
	t.advance()
}

// MaxInvisibleLooks bounds the looks at a streamed id without a visible
// row (about half a second in all); after that its row is left to the
// safety-net poll.
const MaxInvisibleLooks = 8

// NotVisible puts streamed ids that a claim could not take (their rows not
// yet visible to it, or visible but not claimable yet) back at the head of
// the queue, and returns them with how long to wait before the next look.
// Ids looked at too often are returned neither: they settle, and the
// ordinary claim finds their rows if they ever appear or become claimable.
func (t *Tracker[P]) NotVisible(ids []int64) (again []int64, wait time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	looks := 0
	for _, id := range ids {
		n := t.invisible[id] + 1
		if n > MaxInvisibleLooks {
			delete(t.invisible, id)
			t.settleLocked(id)
			continue
		}
		t.invisible[id] = n
		looks = max(looks, n)
		again = append(again, id)
	}
	t.queue = append(append([]int64(nil), again...), t.queue...)
	t.advance()
	return again, time.Millisecond << looks
}

// ClaimedByPoll records that an ordinary claim took ids; those the stream
// knows of leave the queue and settle when the claim completes.
func (t *Tracker[P]) ClaimedByPoll(token string, leaseEnd time.Time, got []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var mine []int64
	taken := map[int64]bool{}
	for _, id := range got {
		if _, known := t.byID[id]; known {
			mine = append(mine, id)
			t.inClaim[id] = token
			taken[id] = true
		}
	}
	if len(mine) == 0 {
		return
	}
	t.claims[token] = mine
	t.leaseEnd[token] = leaseEnd
	kept := t.queue[:0]
	for _, id := range t.queue {
		if !taken[id] {
			kept = append(kept, id)
		}
	}
	t.queue = kept
}

// Completed settles the events of a recorded claim.
func (t *Tracker[P]) Completed(token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range t.claims[token] {
		delete(t.inClaim, id)
		t.settleLocked(id)
	}
	delete(t.claims, token)
	delete(t.leaseEnd, token)
	t.advance()
}

// Expire settles the claims whose lease ended before they were recorded
// (the relay gave up recording them: their rows are the reaper's, which
// returns them to PENDING), so that a long database outage cannot hold the
// position back for ever.
func (t *Tracker[P]) Expire(now time.Time) {
	t.mu.Lock()
	var ended []string
	for token, end := range t.leaseEnd {
		if now.After(end) {
			ended = append(ended, token)
		}
	}
	t.mu.Unlock()
	for _, token := range ended {
		t.Completed(token)
	}
}

func (t *Tracker[P]) settleLocked(id int64) {
	if x, ok := t.byID[id]; ok {
		x.pending--
		delete(t.byID, id)
	}
}

// advance moves confirmed past the settled transactions at the head.
func (t *Tracker[P]) advance() {
	for len(t.txns) > 0 && t.txns[0].pending == 0 {
		if t.after(t.txns[0].end, t.confirmed) {
			t.confirmed = t.txns[0].end
		}
		t.txns[0] = nil
		t.txns = t.txns[1:]
	}
}

// Idle notes the server's position between transactions (a keepalive, or
// the commit of a transaction that inserted nothing into the outbox):
// when nothing streamed is unsettled and no transaction is open, the
// confirmed position may move up to it, so an idle outbox holds no log
// (WAL, binary log files) while the rest of the database writes.
func (t *Tracker[P]) Idle(serverPos P) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.txns) == 0 && !t.open && t.after(serverPos, t.confirmed) {
		t.confirmed = serverPos
	}
}

// Position returns the position to save or confirm and how many events
// are unsettled.
func (t *Tracker[P]) Position() (P, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confirmed, len(t.byID)
}
