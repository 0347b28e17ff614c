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

func TestPurgePagesStopsAtAYoungPage(t *testing.T) {
	pages := []PurgePage{{Deleted: 2, Last: 10, Old: 3}, {Deleted: 1, Last: 20, Old: 0}, {Deleted: 5, Last: 30, Old: 5}}
	var afters []int64
	total, err := PurgePages(func(after int64) (PurgePage, error) {
		afters = append(afters, after)
		return pages[len(afters)-1], nil
	})
	if err != nil || total != 3 || !reflect.DeepEqual(afters, []int64{0, 10}) {
		t.Fatalf("total %d, pages after %v, err %v", total, afters, err)
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

func TestRunSweep(t *testing.T) {
	var steps []string
	left := map[SweepStep]int64{SweepReap: 3, SweepExpire: 1, SweepBlock: 9, SweepUnblock: 0}
	res, err := RunSweep(SweepRequest{Limit: 2}, nil, func(s SweepStep) (int64, error) {
		steps = append(steps, s.String())
		n := min(left[s], 2)
		left[s] -= n
		return n, nil
	})
	if err != nil || res != (SweepResult{Reaped: 3, Expired: 1}) ||
		strings.Join(steps, ",") != "reap,reap,expire,unblock" {
		t.Fatalf("res %+v, steps %v, err %v", res, steps, err)
	}
	boom := errors.New("boom")
	_, err = RunSweep(SweepRequest{FailedBlocks: true}, func(op string, err error) error { return errors.New(op + ": " + err.Error()) },
		func(s SweepStep) (int64, error) {
			if s == SweepBlock {
				return 0, boom
			}
			return 0, nil
		})
	if err == nil || err.Error() != "sweep: block events behind FAILED ones: boom" {
		t.Fatalf("err %v", err)
	}
}

func TestHeadersAndText(t *testing.T) {
	if h, err := EncodeHeaders(0, nil); h != "{}" || err != nil {
		t.Fatalf("%q %v", h, err)
	}
	if got := DecodeHeaders([]byte(`{"a":"b"}`)); got["a"] != "b" || DecodeHeaders([]byte("{}")) != nil || DecodeHeaders([]byte("[1]")) != nil {
		t.Fatalf("decode: %v", got)
	}
	if got := TruncateRunes("héllo", 2); got != "hé" {
		t.Fatalf("truncate: %q", got)
	}
	if err := WrapError("stats", errors.New("x"), `table "t"`); err.Error() != "stats: table \"t\" does not exist: run `outbox migrate` first: x" {
		t.Fatalf("wrap: %v", err)
	}
	if WrapError("stats", nil, "") != nil {
		t.Fatal("wrap(nil) != nil")
	}
}
