package mysql

import (
	"slices"
	"testing"

	"github.com/txoutbox/outbox"
)

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
