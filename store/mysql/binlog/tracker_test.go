package binlog

import (
	"fmt"
	"testing"
	"time"

	"github.com/txoutbox/outbox/internal/cdctrack"
)

// at is a position in the tracker tests' binary log file n.
func at(file int, offset uint32) Position {
	return Position{File: fmt.Sprintf("mysql-bin.%06d", file), Offset: offset}
}

func wantPos(t *testing.T, tr *tracker, want Position) {
	t.Helper()
	if got, _ := tr.Position(); got != want {
		t.Fatalf("confirmed position %s, want %s", got, want)
	}
}

// The confirmed position moves past a transaction only when each of its
// events is settled, and never past an earlier unsettled transaction;
// the idle position moves it only when nothing streamed is unsettled.
func TestBinlogTrackerConfirmsOnlySettledTransactions(t *testing.T) {
	t.Parallel()
	tr := newTracker(at(1, 100))
	lease := time.Now().Add(time.Minute)
	tr.Commit(at(1, 200), []int64{1, 2})
	tr.Commit(at(2, 4), []int64{3}) // after a rotation
	tr.Idle(at(3, 1000))            // events unsettled: the idle position must not move it
	wantPos(t, tr, at(1, 100))

	ids := tr.Take(10)
	if len(ids) != 3 {
		t.Fatalf("took %v", ids)
	}
	tr.Claimed("b", lease, []int64{3}, []int64{3}) // the later transaction first
	tr.Completed("b")
	wantPos(t, tr, at(1, 100))
	tr.Claimed("a", lease, []int64{1, 2}, []int64{1}) // 2 not claimable: handed back
	wantPos(t, tr, at(1, 100))
	tr.Completed("a")
	wantPos(t, tr, at(2, 4))

	tr.Commit(at(2, 400), nil)
	wantPos(t, tr, at(2, 400))
	tr.Idle(at(3, 1000))
	wantPos(t, tr, at(3, 1000))
	tr.Idle(at(2, 900)) // an earlier idle position never moves it back
	wantPos(t, tr, at(3, 1000))
}

// A transaction sent again after a reconnect settles through the claim
// that already holds its events; one at or before the confirmed position
// is ignored.
func TestBinlogTrackerReplayAfterReconnect(t *testing.T) {
	t.Parallel()
	tr := newTracker(at(1, 100))
	lease := time.Now().Add(time.Minute)
	tr.Commit(at(1, 200), []int64{1})
	tr.Commit(at(1, 300), []int64{2})
	tr.Claimed("a", lease, tr.Take(1), []int64{1})
	tr.ResetAt(at(1, 100))
	if n := tr.Queued(); n != 0 {
		t.Fatalf("%d ids still queued after the reset", n)
	}
	if n := tr.Commit(at(1, 200), []int64{1}); n != 0 {
		t.Fatalf("an id a claim holds was queued again (%d)", n)
	}
	if n := tr.Commit(at(1, 300), []int64{2}); n != 1 {
		t.Fatalf("an unclaimed id sent again was queued %d times, want once", n)
	}
	wantPos(t, tr, at(1, 100))
	tr.Completed("a")
	wantPos(t, tr, at(1, 200))
	if n := tr.Commit(at(1, 150), []int64{9}); n != 0 || tr.Queued() != 1 {
		t.Fatal("a transaction before the confirmed position was queued")
	}
}

// An id the ordinary claim took leaves the queue and settles when that
// claim completes.
func TestBinlogTrackerClaimedByPoll(t *testing.T) {
	t.Parallel()
	tr := newTracker(at(1, 100))
	tr.Commit(at(1, 200), []int64{1, 2})
	tr.ClaimedByPoll("p", time.Now().Add(time.Minute), []int64{2, 77})
	if ids := tr.Take(10); len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("queue after the poll's claim: %v, want [1]", ids)
	}
	tr.Claimed("s", time.Now().Add(time.Minute), []int64{1}, []int64{1})
	tr.Completed("s")
	wantPos(t, tr, at(1, 100))
	tr.Completed("p")
	wantPos(t, tr, at(1, 200))
	if _, unsettled := tr.Position(); unsettled != 0 {
		t.Fatalf("%d events unsettled, want 0", unsettled)
	}
}

// A claim whose lease ended unrecorded settles (the reaper owns its rows),
// so the position is not held for ever; ids whose rows are not yet
// visible are offered again a bounded number of times.
func TestBinlogTrackerExpiresUnrecordedClaimsAndBoundsInvisibleLooks(t *testing.T) {
	t.Parallel()
	tr := newTracker(at(1, 100))
	now := time.Now()
	tr.Commit(at(1, 200), []int64{1})
	tr.Claimed("a", now.Add(time.Second), tr.Take(10), []int64{1})
	tr.Expire(now)
	wantPos(t, tr, at(1, 100))
	tr.Expire(now.Add(2 * time.Second))
	wantPos(t, tr, at(1, 200))

	tr.Commit(at(1, 300), []int64{2})
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
	wantPos(t, tr, at(1, 300))
}
