package lanes

import (
	"slices"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func row(id int64, agg string, part Part) Row {
	return Row{ID: id, Agg: Key{"payment", agg}, Status: outbox.StatusPending, AvailableAt: t0.Add(time.Duration(id) * time.Millisecond), Part: part}
}

// window returns the rows as window rows and, each, as its aggregate's run.
func window(rs ...Row) []Row {
	var out []Row
	for _, r := range rs {
		out = append(out, r)
		r.Part = PartRun
		out = append(out, r)
	}
	return out
}

func TestPlanTakesHeadsFirstThenRuns(t *testing.T) {
	rows := window(row(1, "a", PartFIFO), row(2, "b", PartFIFO), row(3, "c", PartFIFO), row(4, "a", PartFIFO))
	p := PlanClaim(PlanInput{Now: t0.Add(time.Second), Limit: 3, FIFO: 3, FailedBlocks: true, Rows: rows})
	if want := []int64{1, 2, 3}; !slices.Equal(p.Claim, want) {
		t.Fatalf("claim = %v, want every head (1, 2, 3) before a's second row (4): %v", p.Claim, want)
	}
	p = PlanClaim(PlanInput{Now: t0.Add(time.Second), Limit: 4, FIFO: 4, FailedBlocks: true, Rows: rows})
	if want := []int64{1, 2, 3, 4}; !slices.Equal(p.Claim, want) {
		t.Fatalf("claim = %v, want %v", p.Claim, want)
	}
}

func TestPlanStopsAtRowsHeldByOtherClaims(t *testing.T) {
	rows := window(row(1, "a", PartFIFO), row(2, "a", PartFIFO), row(3, "b", PartFIFO))
	p := PlanClaim(PlanInput{Now: t0.Add(time.Second), Limit: 10, FIFO: 10, Rows: rows, Claimed: map[int64]bool{1: true}})
	if want := []int64{3}; !slices.Equal(p.Claim, want) {
		t.Fatalf("claim = %v, want %v: a's head is in flight under another claim", p.Claim, want)
	}
	// The relay's own claim in flight is stepped over.
	p = PlanClaim(PlanInput{Now: t0.Add(time.Second), Limit: 10, FIFO: 10, Rows: rows, Own: map[int64]bool{1: true}})
	if want := []int64{2, 3}; !slices.Equal(p.Claim, want) {
		t.Fatalf("claim behind the relay's own = %v, want %v", p.Claim, want)
	}
}

func TestPlanGivenBackRowWaitsForTheLaterBatch(t *testing.T) {
	// Row 1 was given back while row 2, of a later batch of the relay, is
	// still in flight: neither 1 nor 3 may go before 2 is recorded.
	rows := window(row(1, "a", PartFIFO), row(2, "a", PartFIFO), row(3, "a", PartFIFO))
	p := PlanClaim(PlanInput{Now: t0.Add(time.Second), Limit: 10, FIFO: 10, Rows: rows, Own: map[int64]bool{2: true}})
	if len(p.Claim) != 0 {
		t.Fatalf("claim = %v, want nothing of a", p.Claim)
	}
}

func TestPlanBlocksBehindFailedAndDefersBehindBackoff(t *testing.T) {
	failed := row(1, "a", PartRun)
	failed.Status = outbox.StatusFailed
	backoff := row(10, "b", PartRun)
	backoff.AvailableAt = t0.Add(time.Hour)
	rows := append([]Row{failed, backoff}, window(row(2, "a", PartFIFO), row(11, "b", PartFIFO), row(20, "c", PartFIFO))...)
	p := PlanClaim(PlanInput{Now: t0.Add(time.Second), Limit: 10, FIFO: 10, FailedBlocks: true, Rows: rows})
	if want := []int64{20}; !slices.Equal(p.Claim, want) {
		t.Fatalf("claim = %v, want %v", p.Claim, want)
	}
	if want := []int64{2}; !slices.Equal(p.Block, want) {
		t.Fatalf("block = %v, want %v (behind the FAILED head)", p.Block, want)
	}
	if at, ok := p.Defer[11]; !ok || !at.Equal(backoff.AvailableAt) || len(p.Defer) != 1 {
		t.Fatalf("defer = %v, want 11 to the head's available_at", p.Defer)
	}
	// FAILED does not block when the policy says so.
	p = PlanClaim(PlanInput{Now: t0.Add(time.Second), Limit: 10, FIFO: 10, FailedBlocks: false, Rows: rows})
	if want := []int64{2, 20}; !slices.Equal(p.Claim, want) || len(p.Block) != 0 {
		t.Fatalf("claim without blocking = %v (block %v), want %v", p.Claim, p.Block, want)
	}
}

func TestPlanDeadlineRowsShareTheWindow(t *testing.T) {
	var rows []Row
	for i := int64(1); i <= 4; i++ {
		rows = append(rows, window(row(i, "fifo"+string(rune('0'+i)), PartFIFO))...)
	}
	edf := row(9, "edf", PartDeadline)
	rows = append(rows, window(edf)...)
	p := PlanClaim(PlanInput{Now: t0.Add(time.Second), Limit: 2, FIFO: 1, Rows: rows})
	if want := []int64{1, 9}; !slices.Equal(p.Claim, want) {
		t.Fatalf("claim = %v, want the oldest (1) and the deadline row (9)", p.Claim)
	}
}

func TestPlanOnlyStopsAtRowsNotGiven(t *testing.T) {
	rows := window(row(1, "a", PartFIFO), row(2, "a", PartFIFO), row(3, "b", PartFIFO))
	p := PlanClaim(PlanInput{Now: t0.Add(time.Second), Limit: 10, FIFO: 10, Rows: rows, Only: map[int64]bool{2: true, 3: true}})
	if want := []int64{3}; !slices.Equal(p.Claim, want) {
		t.Fatalf("claim = %v, want %v: a's head (1) was not given, so 2 may not pass it", p.Claim, want)
	}
}

func TestPlanWindowRowsAreNotRuns(t *testing.T) {
	// The window names a's rows 1 and 3, but its run as read stops at 1:
	// 3 may not be claimed, since a row between them may be unread.
	rows := []Row{row(1, "a", PartFIFO), row(3, "a", PartFIFO), row(1, "a", PartRun)}
	p := PlanClaim(PlanInput{Now: t0.Add(time.Second), Limit: 10, FIFO: 10, Rows: rows})
	if want := []int64{1}; !slices.Equal(p.Claim, want) {
		t.Fatalf("claim = %v, want %v", p.Claim, want)
	}
}

func TestHorizonSettlesAfterTheTransactionsEnd(t *testing.T) {
	var h Horizon
	// Ids up to 50 were drawn by transactions below 105, the read's own.
	if _, ok := h.Observe(Snapshot{LastID: 50, Xid: 105, Xmin: 100}); ok {
		t.Fatal("settled in the read that took the step")
	}
	// A long transaction (104) holds it back.
	if _, ok := h.Observe(Snapshot{LastID: 60, Xid: 110, Xmin: 104}); ok {
		t.Fatal("settled under a long transaction")
	}
	// xmin 105: the read of step 1 itself may still run.
	if _, ok := h.Observe(Snapshot{LastID: 70, Xid: 120, Xmin: 105}); ok {
		t.Fatal("settled while the step's own transaction may run")
	}
	settled, ok := h.Observe(Snapshot{LastID: 75, Xid: 125, Xmin: 106})
	if !ok || settled != 50 {
		t.Fatalf("settled = %d, %v; want 50 (the step whose id is below 106)", settled, ok)
	}
	settled, ok = h.Observe(Snapshot{LastID: 80, Xid: 130, Xmin: 126})
	if !ok || settled != 75 {
		t.Fatalf("settled = %d, %v; want 75", settled, ok)
	}
	// The bound never goes back.
	h.pending = append(h.pending, horizonStep{last: 10, xid: 1})
	settled, ok = h.Observe(Snapshot{LastID: 90, Xid: 140, Xmin: 131})
	if !ok || settled != 80 {
		t.Fatalf("settled = %d, %v; want 80", settled, ok)
	}
	// The sequence restarted (TRUNCATE ... RESTART IDENTITY): nothing is
	// settled until transactions after the restart have ended.
	if settled, ok := h.Observe(Snapshot{LastID: 3, Xid: 150, Xmin: 141}); ok {
		t.Fatalf("after the sequence went back: settled = %d; want nothing known", settled)
	}
	settled, ok = h.Observe(Snapshot{LastID: 5, Xid: 160, Xmin: 151})
	if !ok || settled != 3 {
		t.Fatalf("settled = %d, %v; want 3", settled, ok)
	}
}

func TestPlanEmpty(t *testing.T) {
	for _, tc := range []struct {
		p    Plan
		want bool
	}{
		{Plan{}, true},
		{Plan{Claim: []int64{1}}, false},
		{Plan{Block: []int64{1}}, false},
		{Plan{Defer: map[int64]time.Time{1: t0}}, false},
	} {
		if got := tc.p.Empty(); got != tc.want {
			t.Errorf("%+v.Empty() = %v, want %v", tc.p, got, tc.want)
		}
	}
}

// The window is the first Limit due rows by available_at, not by id: a
// row retried (due later) does not keep an older due row out of it.
func TestPlanWindowIsByDueTime(t *testing.T) {
	late := row(1, "a", PartFIFO)
	late.AvailableAt = t0.Add(2 * time.Second)
	early := row(2, "b", PartFIFO)
	early.AvailableAt = t0.Add(time.Second)
	p := PlanClaim(PlanInput{Now: t0.Add(time.Minute), Limit: 1, FIFO: 1, Rows: window(late, early)})
	if want := []int64{2}; !slices.Equal(p.Claim, want) {
		t.Fatalf("claim = %v, want %v: the row due first", p.Claim, want)
	}
}

// Among heads of equal place and priority (here a FIFO head and a
// deadline head, more than Limit), the one whose aggregate was due first
// goes first, whatever the ids.
func TestPlanHeadsByFirstDue(t *testing.T) {
	fifo := row(1, "a", PartFIFO)
	fifo.AvailableAt = t0.Add(2 * time.Second)
	edf := row(2, "b", PartDeadline)
	edf.AvailableAt = t0.Add(time.Second)
	p := PlanClaim(PlanInput{Now: t0.Add(time.Minute), Limit: 1, FIFO: 1, Rows: window(fifo, edf)})
	if want := []int64{2}; !slices.Equal(p.Claim, want) {
		t.Fatalf("claim = %v, want %v: the head due first", p.Claim, want)
	}
}

// Behind a FAILED head, the aggregate's window rows past its run as read
// are BLOCKED too: each claim clears its window of what it cannot take,
// however long the pile behind the head.
func TestPlanBlocksWindowRowsPastTheRun(t *testing.T) {
	failed := row(1, "a", PartRun)
	failed.Status = outbox.StatusFailed
	rows := []Row{failed, row(2, "a", PartRun), row(2, "a", PartFIFO), row(7, "a", PartFIFO)}
	rows = append(rows, window(row(3, "b", PartFIFO))...)
	p := PlanClaim(PlanInput{Now: t0.Add(time.Minute), Limit: 10, FIFO: 10, FailedBlocks: true, Rows: rows})
	if want := []int64{2, 7}; !slices.Equal(p.Block, want) {
		t.Fatalf("block = %v, want %v: the run's row and the window's row past the run", p.Block, want)
	}
	if want := []int64{3}; !slices.Equal(p.Claim, want) {
		t.Fatalf("claim = %v, want %v", p.Claim, want)
	}
}
