package store

import (
	"errors"
	"reflect"
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

func TestOperatorChange(t *testing.T) {
	a := OperatorAction{EventID: outbox.EventID{1}, Reason: "fixed upstream"}
	if err := RequeueChange.Check(a, "EXPIRED"); err != nil {
		t.Fatal(err)
	}
	err := RequeueChange.Check(a, "PENDING")
	if !errors.Is(err, outbox.ErrConflict) || !strings.HasSuffix(err.Error(), "is PENDING; requeued applies to FAILED or EXPIRED events") {
		t.Fatalf("conflict: %v", err)
	}
}
