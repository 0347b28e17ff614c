package lanes

import "testing"

// TestHorizonUnderALongTransaction: while a transaction older than every
// read stays open (xmin stuck below the reads' ids), nothing is settled
// and the horizon keeps only its newest steps; once it ends, the newest
// read settles every id it saw, and an older step never moves the bound
// back.
func TestHorizonUnderALongTransaction(t *testing.T) {
	var h Horizon
	const reads = 200
	for i := range reads {
		if settled, ok := h.Observe(Snapshot{LastID: int64(10 * (i + 1)), Xid: uint64(1000 + i), Xmin: 5}); ok {
			t.Fatalf("read %d: settled up to %d while a transaction older than every read is open", i, settled)
		}
	}
	if len(h.pending) > 64 {
		t.Fatalf("%d steps kept under the long transaction, want at most 64", len(h.pending))
	}
	// The long transaction ended: every earlier read's ids are settled.
	settled, ok := h.Observe(Snapshot{LastID: 10 * (reads + 1), Xid: 5000, Xmin: 4000})
	if !ok || settled != 10*reads {
		t.Fatalf("after the long transaction: settled %d (%v), want %d: the newest earlier read's last id", settled, ok, 10*reads)
	}
	// A later read whose snapshot still has an older xmin settles nothing
	// new, and the bound never goes back.
	if again, ok := h.Observe(Snapshot{LastID: 10 * (reads + 2), Xid: 5001, Xmin: 4500}); !ok || again != settled {
		t.Fatalf("next read: settled %d (%v), want still %d", again, ok, settled)
	}
}
