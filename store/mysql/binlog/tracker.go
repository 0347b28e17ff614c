package binlog

import (
	"sync"
	"time"
)

// tracker holds what the stream received and the relay has not finished,
// and computes the confirmed position: it may be saved past a transaction
// only when each of its events is final or handed to the retry path (its
// row is back in the table's hands: PENDING, BLOCKED or final).
type tracker struct {
	mu sync.Mutex
	// txns are the streamed transactions not yet confirmed, in commit order.
	txns []*txn
	// byID maps each unsettled event (row id) to its transaction.
	byID map[int64]*txn
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
	// confirmed is the position that may be saved.
	confirmed Position
}

type txn struct {
	end     Position
	pending int
}

func newTracker(start Position) *tracker {
	return &tracker{
		byID:      map[int64]*txn{},
		inClaim:   map[int64]string{},
		claims:    map[string][]int64{},
		leaseEnd:  map[string]time.Time{},
		invisible: map[int64]int{},
		confirmed: start,
	}
}

// resetAt forgets the streamed but unclaimed state, for a new stream that
// starts at pos (the saved position) and will send those transactions
// again. Events held by claims in flight stay known to their claims.
func (t *tracker) resetAt(pos Position) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.txns = nil
	t.byID = map[int64]*txn{}
	t.queue = nil
	t.confirmed = pos
}

// commit adds a transaction that ended at end with the outbox rows ids. Ids
// a claim in flight already holds are not queued again; they settle when
// that claim completes.
func (t *tracker) commit(end Position, ids []int64) (queued int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !end.after(t.confirmed) {
		return 0 // sent again after a reconnect, already settled
	}
	x := &txn{end: end}
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

// take removes up to n ids from the head of the queue.
func (t *tracker) take(n int) []int64 {
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

// queued returns how many ids wait to be claimed.
func (t *tracker) queued() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue)
}

// putBack returns ids to the head of the queue (a claim by id failed).
func (t *tracker) putBack(ids []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.queue = append(append([]int64(nil), ids...), t.queue...)
}

// claimed records that token holds ids (those the stream knows of); the
// other ids of offered were not claimable and are settled now: their rows
// stay with the table and the ordinary claim.
func (t *tracker) claimed(token string, leaseEnd time.Time, offered []int64, got []int64) {
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

// maxInvisibleLooks bounds the looks at a streamed id without a visible
// row (about half a second in all); after that its row is left to the
// safety-net poll.
const maxInvisibleLooks = 8

// notVisible puts streamed ids that a claim could not take (their rows not
// yet visible to it, or visible but not claimable yet) back at the head of
// the queue, and returns them with how long to wait before the next look.
// Ids looked at too often are returned neither: they settle, and the
// ordinary claim finds their rows if they ever appear or become claimable.
func (t *tracker) notVisible(ids []int64) (again []int64, wait time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	looks := 0
	for _, id := range ids {
		n := t.invisible[id] + 1
		if n > maxInvisibleLooks {
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

// claimedByPoll records that an ordinary claim took ids; those the stream
// knows of leave the queue and settle when the claim completes.
func (t *tracker) claimedByPoll(token string, leaseEnd time.Time, got []int64) {
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

// completed settles the events of a recorded claim.
func (t *tracker) completed(token string) {
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

// expire settles the claims whose lease ended before they were recorded
// (the relay gave up recording them: their rows are the reaper's, which
// returns them to PENDING), so that a long database outage cannot hold the
// position back for ever.
func (t *tracker) expire(now time.Time) {
	t.mu.Lock()
	var ended []string
	for token, end := range t.leaseEnd {
		if now.After(end) {
			ended = append(ended, token)
		}
	}
	t.mu.Unlock()
	for _, token := range ended {
		t.completed(token)
	}
}

func (t *tracker) settleLocked(id int64) {
	if x, ok := t.byID[id]; ok {
		x.pending--
		delete(t.byID, id)
	}
}

// advance moves confirmed past the settled transactions at the head.
func (t *tracker) advance() {
	for len(t.txns) > 0 && t.txns[0].pending == 0 {
		if t.txns[0].end.after(t.confirmed) {
			t.confirmed = t.txns[0].end
		}
		t.txns[0] = nil
		t.txns = t.txns[1:]
	}
}

// idle notes the stream's position between transactions (after the
// commit of one that inserted nothing into the outbox): when nothing
// streamed is unsettled, the saved position may move up to it, so an idle
// outbox does not keep its position in a binary log file the server is
// about to purge while the rest of the database writes.
func (t *tracker) idle(pos Position) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.txns) == 0 && pos.after(t.confirmed) {
		t.confirmed = pos
	}
}

// position returns the position to save and how many events are unsettled.
func (t *tracker) position() (Position, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confirmed, len(t.byID)
}
