package mysql

import (
	"slices"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

func TestPlanClaim(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	past, future := now.Add(-time.Second), now.Add(time.Hour)
	win := func(k int, ids ...int64) []runRow {
		var rs []runRow
		for _, id := range ids {
			rs = append(rs, runRow{k: k, id: id, avail: past})
		}
		return rs
	}
	ids := func(rs []runRow) []int64 {
		var out []int64
		for _, r := range rs {
			out = append(out, r.id)
		}
		slices.Sort(out)
		return out
	}
	cases := []struct {
		name             string
		aggs             []claimAgg
		limit            int
		want, wantBlock  []int64
		wantDefer        []int64
		wantDeferToAvail time.Time
	}{
		{"whole window, no gap", []claimAgg{{rows: win(0, 1, 2, 3)}}, 10, []int64{1, 2, 3}, nil, nil, time.Time{}},
		{"cut at the gap", []claimAgg{{rows: win(0, 1, 2, 5), gap: 3, gapStatus: "BLOCKED"}}, 10, []int64{1, 2}, nil, nil, time.Time{}},
		{"head PROCESSING elsewhere", []claimAgg{{rows: win(0, 2, 3), gap: 1, gapStatus: "PROCESSING", gapIsHead: true}}, 10, nil, nil, nil, time.Time{}},
		{"head FAILED blocks the window rows", []claimAgg{{rows: win(0, 2, 3), gap: 1, gapStatus: "FAILED", gapIsHead: true}}, 10, nil, []int64{2, 3}, nil, time.Time{}},
		{"head in backoff defers the window rows", []claimAgg{{rows: win(0, 2, 3), gap: 1, gapStatus: "PENDING", gapAvail: future, gapIsHead: true}},
			10, nil, nil, []int64{2, 3}, future},
		{"due head outside the window is claimed, followers deferred behind it",
			[]claimAgg{{rows: win(0, 2, 3), gap: 1, gapStatus: "PENDING", gapAvail: now, gapIsHead: true}}, 10, []int64{1}, nil, []int64{2, 3}, now},
		{"due head given back before an own batch in flight is not claimed",
			[]claimAgg{{rows: win(0, 5), gap: 1, gapStatus: "PENDING", gapAvail: now, gapIsHead: true, lastMine: 3}}, 10, nil, nil, []int64{5}, now},
		{"after own rows", []claimAgg{{rows: win(0, 4, 5), lastMine: 3}}, 10, []int64{4, 5}, nil, nil, time.Time{}},
		{"window row before the last own row stops the aggregate", []claimAgg{{rows: win(0, 1, 4), lastMine: 3}}, 10, nil, nil, nil, time.Time{}},
		{"breadth first within the limit", []claimAgg{{rows: win(0, 1, 2, 3)}, {rows: win(1, 10, 11)}}, 3, []int64{1, 2, 10}, nil, nil, time.Time{}},
	}
	for _, tc := range cases {
		p := planClaim(tc.aggs, tc.limit, now)
		if got := ids(p.candidates); !slices.Equal(got, tc.want) {
			t.Errorf("%s: candidates %v, want %v", tc.name, got, tc.want)
		}
		if !slices.Equal(p.block, tc.wantBlock) {
			t.Errorf("%s: block %v, want %v", tc.name, p.block, tc.wantBlock)
		}
		var deferred []int64
		for id, at := range p.deferTo {
			deferred = append(deferred, id)
			if at != formatTime(tc.wantDeferToAvail) {
				t.Errorf("%s: row %d deferred to %s, want %s", tc.name, id, at, formatTime(tc.wantDeferToAvail))
			}
		}
		slices.Sort(deferred)
		if !slices.Equal(deferred, tc.wantDefer) {
			t.Errorf("%s: deferred %v, want %v", tc.name, deferred, tc.wantDefer)
		}
		for k, run := range p.byAgg {
			for i := 1; i < len(run); i++ {
				if run[i].id <= run[i-1].id {
					t.Errorf("%s: aggregate %d's run is not in id order: %v", tc.name, k, ids(run))
				}
			}
		}
	}
}

// TestLockOrder: Enqueue locks every aggregate of its events, each once,
// in one ascending order, so that two producers never deadlock on them.
func TestLockOrder(t *testing.T) {
	ev := func(typ, id string) outbox.Event { return outbox.Event{AggregateType: typ, AggregateID: id} }
	got := lockOrder([]outbox.Event{ev("payment", "b"), ev("order", "z"), ev("payment", "a"), ev("payment", "b"), ev("order", "a")})
	want := []aggKey{{"order", "a"}, {"order", "z"}, {"payment", "a"}, {"payment", "b"}}
	if !slices.Equal(got, want) {
		t.Fatalf("lockOrder = %v, want %v", got, want)
	}
}

func TestJSONDepth(t *testing.T) {
	for in, want := range map[string]int{
		`1`: 0, `{}`: 1, `[[1],[2,[3]]]`: 3, `{"a":"[[[{{"}`: 1, `["\"[", {"b": ["\\"]}]`: 3,
	} {
		if got := jsonDepth([]byte(in)); got != want {
			t.Errorf("jsonDepth(%s) = %d, want %d", in, got, want)
		}
	}
}
