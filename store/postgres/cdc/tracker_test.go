package cdc

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

func wantPos(t *testing.T, tr *tracker, want pglogrepl.LSN) {
	t.Helper()
	if got, _ := tr.position(); got != want {
		t.Fatalf("confirmed position %s, want %s", got, want)
	}
}

// The confirmed position moves past a transaction only when each of its
// events is settled, and never past an earlier unsettled transaction.
func TestTrackerConfirmsOnlySettledTransactions(t *testing.T) {
	t.Parallel()
	tr := newTracker(100)
	lease := time.Now().Add(time.Minute)
	tr.begin()
	tr.commit(200, []int64{1, 2})
	tr.begin()
	tr.commit(300, []int64{3})
	tr.idle(1000) // events unsettled: the keepalive must not move it
	wantPos(t, tr, 100)

	ids := tr.take(10)
	if len(ids) != 3 {
		t.Fatalf("took %v", ids)
	}
	tr.claimed("b", lease, []int64{3}, []int64{3}) // the later transaction first
	tr.completed("b")
	wantPos(t, tr, 100)
	tr.claimed("a", lease, []int64{1, 2}, []int64{1}) // 2 not claimable: handed back
	wantPos(t, tr, 100)
	tr.completed("a")
	wantPos(t, tr, 300)

	tr.begin() // an open transaction holds the keepalive back too
	tr.idle(1000)
	wantPos(t, tr, 300)
	tr.commit(400, nil)
	tr.idle(1000)
	wantPos(t, tr, 1000)
}

// A transaction sent again after a reconnect settles through the claim
// that already holds its events; one at or before the confirmed position
// is ignored.
func TestTrackerReplayAfterReconnect(t *testing.T) {
	t.Parallel()
	tr := newTracker(100)
	lease := time.Now().Add(time.Minute)
	tr.commit(200, []int64{1})
	tr.claimed("a", lease, tr.take(10), []int64{1})
	tr.reset()
	if n := tr.commit(200, []int64{1}); n != 0 {
		t.Fatalf("an id a claim holds was queued again (%d)", n)
	}
	wantPos(t, tr, 100)
	tr.completed("a")
	wantPos(t, tr, 200)
	if n := tr.commit(150, []int64{9}); n != 0 || tr.queued() != 0 {
		t.Fatal("a transaction before the confirmed position was queued")
	}
}

// A claim whose lease ended unrecorded settles (the reaper owns its rows),
// so the slot is not held for ever; ids whose rows are not yet visible are
// offered again a bounded number of times.
func TestTrackerExpiresUnrecordedClaimsAndBoundsInvisibleLooks(t *testing.T) {
	t.Parallel()
	tr := newTracker(100)
	now := time.Now()
	tr.commit(200, []int64{1})
	tr.claimed("a", now.Add(time.Second), tr.take(10), []int64{1})
	tr.expire(now)
	wantPos(t, tr, 100)
	tr.expire(now.Add(2 * time.Second))
	wantPos(t, tr, 200)

	tr.commit(300, []int64{2})
	for i := 1; i <= maxInvisibleLooks; i++ {
		ids := tr.take(10)
		again, wait := tr.notVisible(ids)
		if len(again) != 1 || wait != time.Millisecond<<i {
			t.Fatalf("look %d: again %v, wait %s", i, again, wait)
		}
	}
	again, _ := tr.notVisible(tr.take(10))
	if len(again) != 0 || tr.queued() != 0 {
		t.Fatalf("id offered again after %d looks", maxInvisibleLooks)
	}
	wantPos(t, tr, 300)
}
