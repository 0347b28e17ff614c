package filter

import (
	"reflect"
	"strconv"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

func TestList(t *testing.T) {
	if w, args := List(store.ListFilter{}, nil); w != "" || len(args) != 0 {
		t.Fatalf("empty filter: %q %v", w, args)
	}
	f := store.ListFilter{Status: outbox.StatusFailed, AggregateID: "p1", BeforeID: 7}
	w, args := List(f, func(n int) string { return "$" + strconv.Itoa(n) })
	if w != " WHERE status = $1 AND aggregate_id = $2 AND id < $3" || !reflect.DeepEqual(args, []any{"FAILED", "p1", int64(7)}) {
		t.Fatalf("got %q %v", w, args)
	}
	if w, _ := List(f, nil); w != " WHERE status = ? AND aggregate_id = ? AND id < ?" {
		t.Fatalf("got %q", w)
	}
}

func TestReplay(t *testing.T) {
	pg := SQL{Mark: func(n int) string { return "$" + strconv.Itoa(n) }}
	f := store.ReplayFilter{AggregateType: "payment", EventType: "Captured"}
	w, args := Replay(f, pg, "", "")
	if w != "aggregate_type = $1 AND status = 'PROCESSED' AND event_type = $2" || !reflect.DeepEqual(args, []any{"payment", "Captured"}) {
		t.Fatalf("got %q %v", w, args)
	}
	// One aggregate of the filter's: its type and id replace the filter's.
	w, args = Replay(f, SQL{}, "payment", "p1")
	if w != "aggregate_type = ? AND aggregate_id = ? AND status = 'PROCESSED' AND event_type = ?" ||
		!reflect.DeepEqual(args, []any{"payment", "p1", "Captured"}) {
		t.Fatalf("got %q %v", w, args)
	}
}
