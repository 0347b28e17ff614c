package cdc

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/txoutbox/outbox/internal/cdctrack"
)

func wantPos(t *testing.T, tr *tracker, want pglogrepl.LSN) {
	t.Helper()
	if got, _ := tr.Position(); got != want {
		t.Fatalf("confirmed position %s, want %s", got, want)
	}
}

// The confirmed position moves past a transaction only when each of its
// events is settled, and never past an earlier unsettled transaction.
func TestTrackerConfirmsOnlySettledTransactions(t *testing.T) {
	t.Parallel()
	tr := newTracker(100)
	lease := time.Now().Add(time.Minute)
	tr.Begin()
	tr.Commit(200, []int64{1, 2})
	tr.Begin()
	tr.Commit(300, []int64{3})
	tr.Idle(1000) // events unsettled: the keepalive must not move it
	wantPos(t, tr, 100)

	ids := tr.Take(10)
	if len(ids) != 3 {
		t.Fatalf("took %v", ids)
	}
	tr.Claimed("b", lease, []int64{3}, []int64{3}) // the later transaction first
	tr.Completed("b")
	wantPos(t, tr, 100)
	tr.Claimed("a", lease, []int64{1, 2}, []int64{1}) // 2 not claimable: handed back
	wantPos(t, tr, 100)
	tr.Completed("a")
	wantPos(t, tr, 300)

	tr.Begin() // an open transaction holds the keepalive back too
	tr.Idle(1000)
	wantPos(t, tr, 300)
	tr.Commit(400, nil)
	tr.Idle(1000)
	wantPos(t, tr, 1000)
}

// A transaction sent again after a reconnect settles through the claim
// that already holds its events; one at or before the confirmed position
// is ignored.
func TestTrackerReplayAfterReconnect(t *testing.T) {
	t.Parallel()
	tr := newTracker(100)
	lease := time.Now().Add(time.Minute)
	tr.Commit(200, []int64{1})
	tr.Claimed("a", lease, tr.Take(10), []int64{1})
	tr.Reset()
	if n := tr.Commit(200, []int64{1}); n != 0 {
		t.Fatalf("an id a claim holds was queued again (%d)", n)
	}
	wantPos(t, tr, 100)
	tr.Completed("a")
	wantPos(t, tr, 200)
	if n := tr.Commit(150, []int64{9}); n != 0 || tr.Queued() != 0 {
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
	tr.Commit(200, []int64{1})
	tr.Claimed("a", now.Add(time.Second), tr.Take(10), []int64{1})
	tr.Expire(now)
	wantPos(t, tr, 100)
	tr.Expire(now.Add(2 * time.Second))
	wantPos(t, tr, 200)

	tr.Commit(300, []int64{2})
	for i := 1; i <= cdctrack.MaxInvisibleLooks; i++ {
		ids := tr.Take(10)
		again, wait := tr.NotVisible(ids)
		if len(again) != 1 || wait != time.Millisecond<<i {
			t.Fatalf("look %d: again %v, wait %s", i, again, wait)
		}
	}
	again, _ := tr.NotVisible(tr.Take(10))
	if len(again) != 0 || tr.Queued() != 0 {
		t.Fatalf("id offered again after %d looks", cdctrack.MaxInvisibleLooks)
	}
	wantPos(t, tr, 300)
}
