package pages

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/txoutbox/outbox/store"
)

func TestPurgeStopsAtAYoungPage(t *testing.T) {
	pages := []PurgePage{{Deleted: 2, Last: 10, Old: 3}, {Deleted: 1, Last: 20, Old: 0}, {Deleted: 5, Last: 30, Old: 5}}
	var afters []int64
	total, err := Purge(func(after int64) (PurgePage, error) {
		afters = append(afters, after)
		return pages[len(afters)-1], nil
	})
	if err != nil || total != 3 || !reflect.DeepEqual(afters, []int64{0, 10}) {
		t.Fatalf("total %d, pages after %v, err %v", total, afters, err)
	}
}

func TestSweep(t *testing.T) {
	var steps []string
	left := map[SweepStep]int64{SweepReap: 3, SweepExpire: 1, SweepBlock: 9, SweepUnblock: 0}
	res, err := Sweep(store.SweepRequest{Limit: 2}, nil, func(s SweepStep) (int64, error) {
		steps = append(steps, s.String())
		n := min(left[s], 2)
		left[s] -= n
		return n, nil
	})
	if err != nil || res != (store.SweepResult{Reaped: 3, Expired: 1}) ||
		strings.Join(steps, ",") != "reap,reap,expire,unblock" {
		t.Fatalf("res %+v, steps %v, err %v", res, steps, err)
	}
	boom := errors.New("boom")
	_, err = Sweep(store.SweepRequest{FailedBlocks: true}, func(op string, err error) error { return errors.New(op + ": " + err.Error()) },
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
