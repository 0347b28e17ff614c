package store

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/txoutbox/outbox"
)

func TestPurgeRequestNormalize(t *testing.T) {
	r, err := PurgeRequest{}.Normalize()
	if err != nil || !reflect.DeepEqual(r.Statuses, []outbox.Status{outbox.StatusProcessed, outbox.StatusExpired}) || r.BatchSize != 1000 {
		t.Fatalf("defaults: %+v, %v", r, err)
	}
	if _, err := (PurgeRequest{Statuses: []outbox.Status{outbox.StatusPending}}).Normalize(); !errors.Is(err, outbox.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "not PENDING") {
		t.Fatalf("non-final status: %v", err)
	}
	if _, err := (PurgeRequest{OlderThan: -1}).Normalize(); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("negative retention: %v", err)
	}
}

func TestListFilterWhere(t *testing.T) {
	if w, args := (ListFilter{}).Where(nil); w != "" || len(args) != 0 {
		t.Fatalf("empty filter: %q %v", w, args)
	}
	f := ListFilter{Status: outbox.StatusFailed, AggregateID: "p1", BeforeID: 7}
	w, args := f.Where(func(n int) string { return "$" + strconv.Itoa(n) })
	if w != " WHERE status = $1 AND aggregate_id = $2 AND id < $3" || !reflect.DeepEqual(args, []any{"FAILED", "p1", int64(7)}) {
		t.Fatalf("got %q %v", w, args)
	}
	if w, _ := f.Where(nil); w != " WHERE status = ? AND aggregate_id = ? AND id < ?" {
		t.Fatalf("got %q", w)
	}
}

func TestOperatorChange(t *testing.T) {
	a := OperatorAction{EventID: outbox.EventID{1}, Reason: "fixed upstream"}
	if err := RequeueChange.Check(a, "EXPIRED"); err != nil {
		t.Fatal(err)
	}
	err := RequeueChange.Check(a, "PENDING")
	if !errors.Is(err, outbox.ErrConflict) || !strings.HasSuffix(err.Error(), "is PENDING; requeued applies to FAILED or EXPIRED events") {
		t.Fatalf("conflict: %v", err)
	}
	relay, text := SkipChange.Audit(a, "FAILED")
	if relay != "operator:operator" || text != "skipped by operator (was FAILED): fixed upstream" {
		t.Fatalf("audit: %q %q", relay, text)
	}
}
