package completion

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/backend"
)

func TestChangeOfEachKind(t *testing.T) {
	tests := []struct {
		name string
		o    store.Outcome
		want Change
	}{
		{"delivered on the row", store.Outcome{Kind: store.Delivered, Attempted: true},
			Change{Status: outbox.StatusProcessed, Finishes: true, OnRow: true}},
		{"delivered with a note keeps its attempt row", store.Outcome{Kind: store.Delivered, Attempted: true, Error: "note"},
			Change{Status: outbox.StatusProcessed, Finishes: true}},
		{"delivered without an attempt", store.Outcome{Kind: store.Delivered},
			Change{Status: outbox.StatusProcessed, Finishes: true}},
		{"failed", store.Outcome{Kind: store.Failed, Error: "boom"},
			Change{Status: outbox.StatusFailed, CountsRetry: true, Finishes: true, SetsError: true, DeadLetter: true, Reason: "boom"}},
		{"failed without a text", store.Outcome{Kind: store.Failed},
			Change{Status: outbox.StatusFailed, CountsRetry: true, Finishes: true, SetsError: true, DeadLetter: true, Reason: DeadLetterReason}},
		{"expired", store.Outcome{Kind: store.Expired, Error: "late"},
			Change{Status: outbox.StatusExpired, Finishes: true, SetsError: true}},
		{"retry", store.Outcome{Kind: store.Retry, RetryIn: 3 * time.Second},
			Change{Status: outbox.StatusPending, CountsRetry: true, Reschedules: true, AvailableIn: 3 * time.Second, SetsError: true, PushesBack: true}},
		{"retry never in the past", store.Outcome{Kind: store.Retry, RetryIn: -time.Second},
			Change{Status: outbox.StatusPending, CountsRetry: true, Reschedules: true, SetsError: true, PushesBack: true}},
		{"released", store.Outcome{Kind: store.Released, RetryIn: time.Second, Error: "kept out"},
			Change{Status: outbox.StatusPending, Reschedules: true, AvailableIn: time.Second}},
		{"released blocked", store.Outcome{Kind: store.Released, Block: true},
			Change{Status: outbox.StatusBlocked, Reschedules: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ChangeOf(&tt.o)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ChangeOf = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNewRefusesUnknownKinds(t *testing.T) {
	for _, k := range []store.OutcomeKind{"", "PROCESSED", store.LeaseExpired, store.Skipped} {
		_, err := New(store.CompleteRequest{Outcomes: []store.Outcome{
			{ID: 1, Kind: store.Delivered}, {ID: 2, Kind: k}}})
		if err == nil || !strings.Contains(err.Error(), "unknown outcome kind") {
			t.Errorf("kind %q: err = %v, want an unknown kind", k, err)
		}
	}
}

func TestNewEmpty(t *testing.T) {
	p, err := New(store.CompleteRequest{Token: "t"})
	if err != nil || !p.Empty() || len(p.Rows) != 0 {
		t.Fatalf("New(empty) = %+v, %v", p, err)
	}
	if res := p.Result(nil); res.Applied != nil || res.Fenced != nil {
		t.Errorf("Result = %+v, want zero", res)
	}
}

func TestNewBoundsTexts(t *testing.T) {
	long := strings.Repeat("é", textlimit.MaxErrorRunes+50)
	relay := strings.Repeat("r", textlimit.MaxRelayIDRunes+1)
	p, err := New(store.CompleteRequest{RelayID: relay, Outcomes: []store.Outcome{
		{ID: 1, Kind: store.Failed, Error: long},
		{ID: 2, Kind: store.Retry, Error: "bad \x00 byte \xff"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if p.RelayID != relay {
		t.Errorf("RelayID changed: the claimer knows the relay by its requested name")
	}
	if n := utf8.RuneCountInString(p.StoredRelayID); n > textlimit.MaxRelayIDRunes {
		t.Errorf("StoredRelayID has %d runes, want at most %d", n, textlimit.MaxRelayIDRunes)
	}
	for _, o := range p.Outcomes {
		if o.Error != textlimit.ErrorText(o.Error) || utf8.RuneCountInString(o.Error) > textlimit.MaxErrorRunes ||
			!utf8.ValidString(o.Error) || strings.IndexByte(o.Error, 0) >= 0 {
			t.Errorf("outcome %d: error %q is not storable", o.ID, o.Error)
		}
	}
	if r := p.Row(1); r.Reason != p.Outcomes[0].Error {
		t.Errorf("dead letter reason is not the bounded text")
	}
}

func TestDuplicatesApplyTheFirstOutcome(t *testing.T) {
	p, err := New(store.CompleteRequest{Outcomes: []store.Outcome{
		{ID: 9, Kind: store.Retry},
		{ID: 3, Kind: store.Delivered, Attempted: true},
		{ID: 9, Kind: store.Failed},
		{ID: 3, Kind: store.Delivered, Attempted: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.IDs(); !slices.Equal(got, []int64{3, 9}) {
		t.Errorf("IDs = %v, want [3 9]", got)
	}
	if got := p.OutcomeIDs(); !slices.Equal(got, []int64{9, 3, 9, 3}) {
		t.Errorf("OutcomeIDs = %v", got)
	}
	if r := p.Row(9); r.Kind != store.Retry || r.Status != outbox.StatusPending {
		t.Errorf("row 9 = %v %v, want the first outcome (RETRY)", r.Kind, r.Status)
	}
	if p.Row(4) != nil {
		t.Errorf("Row(4) of a row not in the plan is not nil")
	}
	if p.AllDelivered() {
		t.Errorf("AllDelivered with duplicates")
	}
	res := p.Result(map[int64]bool{9: true})
	if !slices.Equal(res.Applied, []int64{9, 9}) || !slices.Equal(res.Fenced, []int64{3, 3}) {
		t.Errorf("Result = %+v", res)
	}
}

func TestShapes(t *testing.T) {
	start, end := time.Unix(100, 0), time.Unix(101, 0)
	del := func(id int64) store.Outcome {
		return store.Outcome{ID: id, Kind: store.Delivered, Attempted: true, StartedAt: start, FinishedAt: end}
	}
	tests := []struct {
		name                   string
		outs                   []store.Outcome
		all, alike, hasExpired bool
	}{
		{"deliveries alike", []store.Outcome{del(1), del(2)}, true, true, false},
		{"a trace id", []store.Outcome{del(1), func() store.Outcome { o := del(2); o.TraceID = "x"; return o }()}, true, false, false},
		{"another finish", []store.Outcome{del(1), func() store.Outcome { o := del(2); o.FinishedAt = start; return o }()}, true, false, false},
		{"a note", []store.Outcome{del(1), func() store.Outcome { o := del(2); o.Error = "n"; return o }()}, true, false, false},
		{"a retry", []store.Outcome{del(1), {ID: 2, Kind: store.Retry}}, false, false, false},
		{"an expiry", []store.Outcome{del(1), {ID: 2, Kind: store.Expired}}, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(store.CompleteRequest{Outcomes: tt.outs})
			if err != nil {
				t.Fatal(err)
			}
			if p.AllDelivered() != tt.all || p.DeliveredAlike() != tt.alike || p.HasExpired() != tt.hasExpired {
				t.Errorf("AllDelivered %v, DeliveredAlike %v, HasExpired %v; want %v %v %v",
					p.AllDelivered(), p.DeliveredAlike(), p.HasExpired(), tt.all, tt.alike, tt.hasExpired)
			}
		})
	}
}

func mixed(t *testing.T, failedBlocks bool) *Plan {
	t.Helper()
	p, err := New(store.CompleteRequest{Token: "tok", FailedBlocks: failedBlocks, Outcomes: []store.Outcome{
		{ID: 5, Kind: store.Expired},
		{ID: 1, Kind: store.Delivered, Attempted: true},
		{ID: 2, Kind: store.Failed, Attempted: true, Error: "no"},
		{ID: 3, Kind: store.Retry, Attempted: true, RetryIn: time.Second},
		{ID: 4, Kind: store.Delivered, Attempted: true},
		{ID: 6, Kind: store.Released},
		{ID: 7, Kind: store.Failed, Attempted: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGroupAndSelections(t *testing.T) {
	p := mixed(t, true)
	kinds, byKind := p.Group([]int64{1, 2, 3, 4, 5, 7, 99})
	if want := []store.OutcomeKind{store.Delivered, store.Failed, store.Retry, store.Expired}; !slices.Equal(kinds, want) {
		t.Errorf("kinds = %v, want %v", kinds, want)
	}
	if !slices.Equal(byKind[store.Delivered], []int64{1, 4}) || !slices.Equal(byKind[store.Failed], []int64{2, 7}) {
		t.Errorf("byKind = %v", byKind)
	}
	if got := p.Expired([]int64{1, 5, 6}); !slices.Equal(got, []int64{5}) {
		t.Errorf("Expired = %v, want [5]", got)
	}
	var dl []int64
	for _, r := range p.DeadLetters([]int64{1, 2, 3, 7}) {
		dl = append(dl, r.ID)
	}
	if !slices.Equal(dl, []int64{2, 7}) || p.Row(7).Reason != DeadLetterReason {
		t.Errorf("DeadLetters = %v (reason of 7 %q)", dl, p.Row(7).Reason)
	}
	var onRow []int64
	for _, r := range p.OnRow(nil) {
		onRow = append(onRow, r.ID)
	}
	if !slices.Equal(onRow, []int64{1, 4}) {
		t.Errorf("OnRow(nil) = %v, want [1 4]", onRow)
	}
	if got := p.OnRow([]int64{4, 2}); len(got) != 1 || got[0].ID != 4 {
		t.Errorf("OnRow([4 2]) = %v", got)
	}
	if got := p.ReplayCandidates(map[int64]bool{1: true}); !slices.Equal(got, []int64{4}) {
		t.Errorf("ReplayCandidates = %v, want [4]", got)
	}
	// A delivery that is a second outcome of its row counts too.
	p2, err := New(store.CompleteRequest{Outcomes: []store.Outcome{
		{ID: 8, Kind: store.Retry, Attempted: true},
		{ID: 8, Kind: store.Delivered, Attempted: true},
		{ID: 2, Kind: store.Delivered, Attempted: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := p2.ReplayCandidates(nil); !slices.Equal(got, []int64{2, 8}) {
		t.Errorf("ReplayCandidates = %v, want [2 8]", got)
	}
}

func TestClaimLeft(t *testing.T) {
	p := mixed(t, false)
	tests := []struct {
		claim, left []int64
		changed     bool
	}{
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8}, []int64{8}, true},
		{[]int64{1, 2, 3, 4, 5, 6, 7}, []int64{}, true},
		{[]int64{8, 9}, []int64{8, 9}, false},
		{nil, nil, false},
	}
	for _, tt := range tests {
		left, changed := p.ClaimLeft(tt.claim)
		if !slices.Equal(left, tt.left) || changed != tt.changed {
			t.Errorf("ClaimLeft(%v) = %v, %v; want %v, %v", tt.claim, left, changed, tt.left, tt.changed)
		}
	}
}

func TestAttempts(t *testing.T) {
	p, err := New(store.CompleteRequest{Token: "tok", Outcomes: []store.Outcome{
		{ID: 1, Kind: store.Delivered, Attempted: true},                 // on the row, applied: none
		{ID: 1, Kind: store.Delivered, Attempted: true},                 // its second outcome: none
		{ID: 2, Kind: store.Delivered, Attempted: true, Error: "note"},  // a note: its row
		{ID: 3, Kind: store.Retry, Attempted: true, Error: "503"},       // fenced: lease lost
		{ID: 4, Kind: store.Released},                                   // not attempted: none
		{ID: 5, Kind: store.Failed, Attempted: true},                    // applied, no text: NULL
		{ID: 6, Kind: store.Delivered, Attempted: true},                 // on the row, fenced: a replay?
		{ID: 7, Kind: store.Delivered, Attempted: true},                 // on the row, a known replay: none
		{ID: 8, Kind: store.Expired, Attempted: true},                   // fenced without text
		{ID: 2, Kind: store.Delivered, Attempted: true, TraceID: "abc"}, // second outcome of 2, on the row kind, but 2's first has a note
	}})
	if err != nil {
		t.Fatal(err)
	}
	applied := map[int64]bool{1: true, 2: true, 4: true, 5: true}
	type row struct {
		id       int64
		err      string
		hasError bool
		replay   bool
	}
	var got []row
	for _, a := range p.Attempts(applied, map[int64]bool{7: true}) {
		got = append(got, row{a.ID, a.Error, a.HasError, a.Replay})
	}
	want := []row{
		{2, "note", true, false},
		{3, "503; " + backend.LeaseLost, true, false},
		{5, "", false, false},
		{6, backend.LeaseLost, true, true},
		{8, backend.LeaseLost, true, false},
		{2, "", false, false},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Attempts =\n%v\nwant\n%v", got, want)
	}
	// Without the replays read, the backend's SQL sorts out row 7.
	if n := len(p.Attempts(applied, nil)); n != len(want)+1 {
		t.Errorf("Attempts without replays: %d rows, want %d", n, len(want)+1)
	}
}

func TestHolds(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(1000+s), 0) }
	applied := []Applied{
		{ID: 1, AggregateType: "a", AggregateID: "1"},
		{ID: 2, AggregateType: "a", AggregateID: "1"}, // FAILED: head of a/1
		{ID: 3, AggregateType: "a", AggregateID: "2", AvailableAt: at(5)},
		{ID: 7, AggregateType: "a", AggregateID: "1"}, // FAILED too, after the head
		{ID: 9, AggregateType: "a", AggregateID: "2", AvailableAt: at(9)},
	}
	p, err := New(store.CompleteRequest{FailedBlocks: true, Outcomes: []store.Outcome{
		{ID: 1, Kind: store.Delivered},
		{ID: 2, Kind: store.Failed},
		{ID: 3, Kind: store.Retry},
		{ID: 7, Kind: store.Failed},
		{ID: 9, Kind: store.Retry},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := p.Holds(applied)
	wantBlock := []Head{{AggregateType: "a", AggregateID: "1", ID: 2}}
	wantDefer := []Head{{AggregateType: "a", AggregateID: "2", ID: 3, AvailableAt: at(9)}}
	if !slices.Equal(h.Block, wantBlock) || !slices.Equal(h.Defer, wantDefer) {
		t.Fatalf("Holds = %+v, want block %v defer %v", h, wantBlock, wantDefer)
	}
	tests := []struct {
		typ, id   string
		row       int64
		available time.Time
		block     bool
		deferTo   time.Time
	}{
		{"a", "1", 5, at(0), true, time.Time{}},
		{"a", "1", 1, at(0), false, time.Time{}},  // before the head
		{"a", "2", 4, at(1), false, at(9)},        // due before the retried head
		{"a", "2", 4, at(10), false, time.Time{}}, // due after it
		{"a", "2", 2, at(1), false, time.Time{}},  // before the head
		{"b", "1", 9, at(0), false, time.Time{}},
	}
	for _, tt := range tests {
		block, deferTo := h.Behind(tt.typ, tt.id, tt.row, tt.available)
		if block != tt.block || !deferTo.Equal(tt.deferTo) {
			t.Errorf("Behind(%s/%s, %d) = %v, %v; want %v, %v", tt.typ, tt.id, tt.row, block, deferTo, tt.block, tt.deferTo)
		}
	}

	p.FailedBlocks = false
	if h := p.Holds(applied); len(h.Block) != 0 || len(h.Defer) != 1 {
		t.Errorf("without FailedBlocks: Holds = %+v, want only the deferral", h)
	}
	if h := p.Holds(nil); !h.Empty() {
		t.Errorf("Holds of nothing applied = %+v", h)
	}
}

// Receipts do not make deliveries differ: a batch of deliveries with and
// without receipts takes the short statement, and each row keeps its own.
func TestDeliveredAlikeWithReceipts(t *testing.T) {
	outs := []store.Outcome{{ID: 1, Kind: store.Delivered, Attempted: true}, {ID: 2, Kind: store.Delivered, Attempted: true}}
	p, err := New(store.CompleteRequest{Token: "tok", Outcomes: outs})
	if err != nil || !p.DeliveredAlike() {
		t.Fatalf("deliveries without receipts: DeliveredAlike %v, %v; want true", p.DeliveredAlike(), err)
	}
	outs[1].Receipt = []byte(`{"kind":"http"}`)
	p, err = New(store.CompleteRequest{Token: "tok", Outcomes: outs})
	if err != nil || !p.DeliveredAlike() {
		t.Fatalf("a delivery with a receipt: DeliveredAlike %v, %v; want true", p.DeliveredAlike(), err)
	}
	if string(p.Row(2).Receipt) != `{"kind":"http"}` {
		t.Fatalf("the plan's row lost the receipt: %q", p.Row(2).Receipt)
	}
}
