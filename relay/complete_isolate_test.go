package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// isolatingStore refuses (store.ErrRefused) every Complete that carries
// the outcome of event 2 unless it is FAILED, and fails the first
// transient Completes that carry event 3 with an error that is not a
// refusal (a read-only database); reads succeed.
type isolatingStore struct {
	featuresOnly
	transient int

	mu       sync.Mutex
	recorded map[int64]store.OutcomeKind
}

func (s *isolatingStore) Complete(_ context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	has := func(id int64, kind store.OutcomeKind) bool {
		return slices.ContainsFunc(req.Outcomes, func(o store.Outcome) bool { return o.ID == id && (kind == "" || o.Kind == kind) })
	}
	if has(2, store.Delivered) {
		return store.CompleteResult{}, fmt.Errorf("%w: value too long for the audit column", store.ErrRefused)
	}
	if has(3, "") && s.transient > 0 {
		s.transient--
		return store.CompleteResult{}, errors.New("ERROR: cannot execute UPDATE in a read-only transaction (SQLSTATE 25006)")
	}
	applied := map[int64]bool{}
	for _, o := range req.Outcomes {
		applied[o.ID] = true
		s.recorded[o.ID] = o.Kind
	}
	return completeResult(req.Outcomes, applied), nil
}

func (s *isolatingStore) GetEvent(context.Context, outbox.EventID) (store.Record, error) {
	return store.Record{}, nil
}

// While the relay records a refused batch in smaller groups, the database
// fails a group's write for a reason that is not the data's (it turned
// read-only for a moment): that group is retried, not split further and
// not ended FAILED. Only the event whose data the database refuses ends
// FAILED.
func TestIsolateRetriesAWriteThatFailsForTheDatabase(t *testing.T) {
	s := &isolatingStore{transient: 3, recorded: map[int64]store.OutcomeKind{}}
	var logs bytes.Buffer
	r, err := New(Config{Store: s, Sink: nopSink{}, Lease: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	claim := &store.Claim{Token: "token", DBTime: time.Now()}
	var outcomes []store.Outcome
	index := map[int64]int{}
	for id := int64(1); id <= 4; id++ {
		index[id] = len(claim.Events)
		claim.Events = append(claim.Events, store.Claimed{Message: outbox.Message{ID: id, EventID: outbox.NewEventID(), AggregateType: "payment", AggregateID: fmt.Sprint("p-", id)}})
		outcomes = append(outcomes, store.Outcome{ID: id, EventID: claim.Events[len(claim.Events)-1].EventID, Kind: store.Delivered, Attempted: true, Attempt: 1})
	}
	now := time.Now()
	b := &batch{relay: r, localClaim: now, localClaimed: now, claim: claim, index: index}
	r.complete(context.Background(), b, outcomes)

	want := map[int64]store.OutcomeKind{1: store.Delivered, 2: store.Failed, 3: store.Delivered, 4: store.Delivered}
	for id, kind := range want {
		if s.recorded[id] != kind {
			t.Errorf("event %d recorded as %q, want %q", id, s.recorded[id], kind)
		}
	}
	if s.transient != 0 {
		t.Errorf("%d transient failures left: the test did not reach them", s.transient)
	}
	if st := r.Stats(); st.Failed != 1 || st.OutcomesRefused != 1 || st.Delivered != 3 {
		t.Errorf("stats %+v, want 1 FAILED (the refused one), 1 outcome refused, 3 delivered", st)
	}
	if !strings.Contains(logs.String(), "SQLSTATE 25006") {
		t.Errorf("the transient failure was not logged:\n%s", logs.String())
	}
}
