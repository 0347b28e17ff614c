package relaytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/internal/textlimit"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/storetest"
)

// RunOutcome checks that the relay can always record what happened to an
// event: whatever text a sink's error carries, when the database refuses
// one event's outcome, and when the write of the outcomes fails for a
// while.
func RunOutcome(t *testing.T, newHarness storetest.Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *storetest.Harness)
	}{
		{"HostileErrorTextsAreStored", testHostileErrorTexts},
		{"RefusedOutcomeIsIsolated", testRefusedOutcome},
		{"ReadOnlyDatabaseEndsNothingFailed", testReadOnlyDatabase},
		{"CompleteFailsThenSucceeds", testCompleteFailsThenSucceeds},
		{"CompleteAmbiguousThenSucceeds", testCompleteAmbiguous},
		{"OutageLongerThanLease", testCompleteOutageOutlastsLease},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

// testHostileErrorTexts: a sink whose errors carry hostile texts. Every
// attempt is recorded (retry_count grows, the event ends FAILED after the
// configured retries, with a readable last_error and dead letter), each
// event is sent exactly MaxRetries+1 times, and the other aggregates'
// events, in the same batches, are delivered.
func testHostileErrorTexts(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	texts := storetest.HostileTexts()
	ids := map[string]outbox.EventID{}
	var events []outbox.Event
	for name := range texts {
		events = append(events, storetest.PaymentEvent("hostile-"+name, 1))
		for i := 0; i < 3; i++ {
			events = append(events, storetest.PaymentEvent(fmt.Sprintf("healthy-%s-%d", name, i), 1))
		}
	}
	got := storetest.Enqueue(t, h, events...)
	for i, e := range events {
		if name, ok := strings.CutPrefix(e.AggregateID, "hostile-"); ok {
			ids[name] = got[i]
		}
	}
	var mu sync.Mutex
	sends := map[outbox.EventID]int{}
	rec := &Recorder{Name: "sink", Fail: func(m outbox.Message) error {
		name, ok := strings.CutPrefix(m.AggregateID, "hostile-")
		if !ok {
			return nil
		}
		mu.Lock()
		sends[m.EventID]++
		mu.Unlock()
		return outbox.Retryable(errors.New(texts[name]), 0)
	}}
	cfg := testConfig(h, rec, "hostile")
	cfg.MaxRetries = 2
	r := newRelay(t, cfg)
	drain(t, r, time.Minute)
	if n := len(rec.Deliveries()); n != len(events)-len(texts) {
		t.Errorf("%d healthy deliveries, want %d", n, len(events)-len(texts))
	}
	for name, id := range ids {
		rr, err := h.Store.GetEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := sends[id]
		mu.Unlock()
		if rr.Status != outbox.StatusFailed || rr.RetryCount != 3 || n != 3 {
			t.Errorf("%s: %s retry_count %d after %d sends; want FAILED, 3, 3", name, rr.Status, rr.RetryCount, n)
		}
		checkStoredText(t, name+" last_error", rr.LastError, "retries exhausted after 3 attempts: ")
		atts, err := h.Store.Attempts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(atts) != 3 {
			t.Errorf("%s: %d audit rows, want 3", name, len(atts))
		}
		for _, a := range atts {
			checkStoredText(t, name+" audit error", a.Error, "")
		}
	}
	dls, err := h.Store.DeadLetters(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != len(texts) {
		t.Errorf("%d dead letters, want %d", len(dls), len(texts))
	}
	for _, d := range dls {
		checkStoredText(t, "dead letter", d.Reason, "retries exhausted")
	}
	if st := r.Stats(); st.CompleteErrors != 0 || st.OutcomesRefused != 0 {
		t.Errorf("the texts were refused: %d complete errors, %d outcomes refused", st.CompleteErrors, st.OutcomesRefused)
	}
}

// checkStoredText fails unless s is what a hostile text may be stored as:
// valid UTF-8 without NUL, within the limits, starting with prefix.
func checkStoredText(t *testing.T, what, s, prefix string) {
	t.Helper()
	switch {
	case !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0:
		t.Errorf("%s is not clean UTF-8: %q", what, s[:min(len(s), 80)])
	case utf8.RuneCountInString(s) > textlimit.MaxErrorRunes || len(s) > textlimit.MaxErrorBytes:
		t.Errorf("%s: %d characters, %d bytes, over the limits", what, utf8.RuneCountInString(s), len(s))
	case !strings.HasPrefix(s, prefix):
		t.Errorf("%s = %q..., want it to start with %q", what, s[:min(len(s), 80)], prefix)
	case s == "":
		t.Errorf("%s is empty", what)
	}
}

// refusingStore refuses (as a custom Store with a limit of its own would)
// every Complete that carries an outcome whose error contains marker.
type refusingStore struct {
	store.Store
	marker  string
	refused atomic.Int64
}

func (s *refusingStore) Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	for _, o := range req.Outcomes {
		if strings.Contains(o.Error, s.marker) {
			s.refused.Add(1)
			return store.CompleteResult{}, storetest.Refused(fmt.Errorf("value too long for the audit column (custom limit)"))
		}
	}
	return s.Store.Complete(ctx, req)
}

// testRefusedOutcome is the regression test of a batch in which one
// event's error cannot be stored: the relay records the others, ends the
// offending event FAILED with a reason that says why, and sends it once,
// not once per lease. The store marks the refusal with store.ErrRefused:
// the relay isolates on nothing else (testReadOnlyDatabase).
func testRefusedOutcome(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	var events []outbox.Event
	for i := 0; i < 20; i++ {
		events = append(events, storetest.PaymentEvent(fmt.Sprintf("agg-%d", i), 1), storetest.PaymentEvent(fmt.Sprintf("agg-%d", i), 2))
	}
	ids := storetest.Enqueue(t, h, events...)
	poison := ids[10] // agg-5's first event
	var sendsOfPoison atomic.Int64
	rec := &Recorder{Name: "sink", Fail: func(m outbox.Message) error {
		if m.EventID == poison {
			sendsOfPoison.Add(1)
			return outbox.Retryable(errors.New("HTTP 503 POISON-TEXT from the gateway"), 0)
		}
		return nil
	}}
	rs := &refusingStore{Store: h.Store, marker: "POISON-TEXT"}
	cfg := testConfig(h, rec, "refused")
	cfg.Store = rs
	// A long lease leaves a loaded machine time to find the offending
	// event before the lease ends.
	cfg.Lease = 12 * time.Second
	cfg.SweepInterval = 20 * time.Millisecond
	r := newRelay(t, cfg)
	drain(t, r, time.Minute)

	rr, err := h.Store.GetEvent(ctx, poison)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Status != outbox.StatusFailed || !strings.Contains(rr.LastError, "database refused to record this event's outcome (RETRY)") {
		t.Fatalf("offending event: %s, last_error %q; want FAILED with the reason", rr.Status, rr.LastError)
	}
	if n := sendsOfPoison.Load(); n != 1 {
		t.Errorf("the offending event was sent %d times, want once", n)
	}
	if rs.refused.Load() == 0 {
		t.Fatal("the store never refused anything: the test tested nothing")
	}
	if st := r.Stats(); st.OutcomesRefused != 1 || st.Failed != 1 {
		t.Errorf("stats %+v, want 1 outcome refused and 1 FAILED", st)
	}
	// Every other event was delivered exactly once; the offending one's
	// follower waits behind it (BLOCKED), as after any FAILED event.
	seen := map[outbox.EventID]int{}
	for _, d := range rec.Deliveries() {
		seen[d.EventID]++
	}
	for i, id := range ids {
		switch {
		case id == poison:
		case i == 11:
			// Unsent, and held: BLOCKED, or still PENDING when the FAILED
			// replacement was recorded after the follower's own outcome
			// and no claim has seen the follower due since (MySQL marks it
			// BLOCKED at its next claim); never PROCESSED.
			if f, err := h.Store.GetEvent(ctx, id); err != nil || (f.Status != outbox.StatusBlocked && f.Status != outbox.StatusPending) || seen[id] != 0 {
				t.Errorf("follower of the offending event: %s sent %d times (%v); want BLOCKED (or PENDING behind the FAILED head), unsent", f.Status, seen[id], err)
			}
		default:
			if seen[id] != 1 {
				t.Errorf("event %d (%s) delivered %d times, want once", i, id, seen[id])
			}
		}
	}
	if n := storetest.CountStatus(t, h.Store, outbox.StatusProcessed); n != int64(len(ids)-2) {
		t.Errorf("%d PROCESSED, want %d", n, len(ids)-2)
	}
	if err := CheckOrder(rec.Deliveries()); err != nil {
		t.Error(err)
	}
}

// flakyStore makes Complete fail a number of times (a connection reset;
// with outage, reads fail too, as when the database is down), then
// behave. ambiguous: the failing calls are applied first, as when the
// commit succeeds and its acknowledgement is lost.
type flakyStore struct {
	store.Store
	ambiguous bool
	outage    bool
	failures  atomic.Int64 // still to inject
	until     atomic.Int64 // with outage: unix nanos until which everything fails
	injected  atomic.Int64
}

var errInjected = errors.New("injected fault: connection reset by peer")

func (s *flakyStore) down() bool {
	return s.outage && time.Now().UnixNano() < s.until.Load()
}

func (s *flakyStore) Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	if s.down() {
		s.injected.Add(1)
		return store.CompleteResult{}, errInjected
	}
	if s.failures.Add(-1) >= 0 {
		s.injected.Add(1)
		if s.ambiguous {
			if _, err := s.Store.Complete(ctx, req); err != nil {
				return store.CompleteResult{}, err
			}
		}
		return store.CompleteResult{}, errInjected
	}
	return s.Store.Complete(ctx, req)
}

func (s *flakyStore) Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error) {
	if s.down() {
		return nil, errInjected
	}
	return s.Store.Claim(ctx, req)
}

func (s *flakyStore) Sweep(ctx context.Context, req store.SweepRequest) (store.SweepResult, error) {
	if s.down() {
		return store.SweepResult{}, errInjected
	}
	return s.Store.Sweep(ctx, req)
}

func (s *flakyStore) GetEvent(ctx context.Context, id outbox.EventID) (store.Record, error) {
	if s.down() {
		return store.Record{}, errInjected
	}
	return s.Store.GetEvent(ctx, id)
}

// faultEvents enqueues n events over 10 aggregates.
func faultEvents(t *testing.T, h *storetest.Harness, n int) []outbox.EventID {
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = storetest.PaymentEvent(fmt.Sprintf("agg-%d", i%10), i)
	}
	return storetest.Enqueue(t, h, events...)
}

// checkAllOnce checks that every event is PROCESSED, delivered in order,
// and at most maxDup deliveries were repeats.
func checkAllOnce(t *testing.T, h *storetest.Harness, rec *Recorder, ids []outbox.EventID, maxDup int) {
	t.Helper()
	seen := map[outbox.EventID]int{}
	for _, d := range rec.Deliveries() {
		seen[d.EventID]++
	}
	dups := len(rec.Deliveries()) - len(seen)
	for _, id := range ids {
		if seen[id] == 0 {
			t.Errorf("event %s never delivered", id)
		}
	}
	if dups > maxDup {
		t.Errorf("%d repeated deliveries, want at most %d", dups, maxDup)
	}
	if n := storetest.CountStatus(t, h.Store, outbox.StatusProcessed); n != int64(len(ids)) {
		t.Errorf("%d PROCESSED, want %d: something was lost", n, len(ids))
	}
	if err := CheckOrder(rec.Deliveries()); err != nil {
		t.Error(err)
	}
}

// testCompleteFailsThenSucceeds: the write of the outcomes fails 3 times,
// then succeeds, within the lease. The relay retries the write, not the
// delivery: nothing is sent twice, nothing is lost, nothing ends FAILED.
func testCompleteFailsThenSucceeds(t *testing.T, h *storetest.Harness) {
	ids := faultEvents(t, h, 200)
	fs := &flakyStore{Store: h.Store}
	fs.failures.Store(3)
	rec := &Recorder{Name: "sink"}
	cfg := testConfig(h, rec, "flaky")
	cfg.Store = fs
	cfg.BatchSize = 50
	r := newRelay(t, cfg)
	drain(t, r, time.Minute)
	if fs.injected.Load() != 3 {
		t.Fatalf("%d faults injected, want 3", fs.injected.Load())
	}
	checkAllOnce(t, h, rec, ids, 0)
	if st := r.Stats(); st.CompleteErrors != 3 || st.OutcomesRefused != 0 || st.Failed != 0 {
		t.Errorf("stats %+v, want 3 complete errors and nothing refused or FAILED", st)
	}
}

// testCompleteAmbiguous: the write is applied but reported failed 3 times
// (the acknowledgement of the commit is lost). The replay changes nothing
// and writes no second audit row.
func testCompleteAmbiguous(t *testing.T, h *storetest.Harness) {
	ctx := context.Background()
	ids := faultEvents(t, h, 100)
	fs := &flakyStore{Store: h.Store, ambiguous: true}
	fs.failures.Store(3)
	rec := &Recorder{Name: "sink"}
	cfg := testConfig(h, rec, "ambiguous")
	cfg.Store = fs
	cfg.BatchSize = 25
	drain(t, newRelay(t, cfg), time.Minute)
	if fs.injected.Load() != 3 {
		t.Fatalf("%d faults injected, want 3", fs.injected.Load())
	}
	checkAllOnce(t, h, rec, ids, 0)
	for _, id := range ids {
		atts, err := h.Store.Attempts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(atts) != 1 || atts[0].Outcome != store.Delivered {
			t.Fatalf("event %s: audit trail %+v, want one DELIVERED row", id, atts)
		}
	}
}

// testCompleteOutageOutlastsLease: the database is down (writes and reads
// fail) for longer than the lease, right after a batch was published. The
// reaper returns those events and they are delivered again: duplicates
// are bounded by the work in flight, nothing is lost, nothing ends FAILED.
func testCompleteOutageOutlastsLease(t *testing.T, h *storetest.Harness) {
	ids := faultEvents(t, h, 200)
	fs := &flakyStore{Store: h.Store, outage: true}
	var once sync.Once
	rec := &Recorder{Name: "sink", Fail: func(outbox.Message) error {
		once.Do(func() { fs.until.Store(time.Now().Add(15 * time.Second).UnixNano()) })
		return nil
	}}
	cfg := testConfig(h, rec, "outage")
	cfg.Store = fs
	cfg.BatchSize = 20
	// An outage one and a half leases long. The lease is 10 s: a claim
	// gets half of it, and on a busy machine a shorter lease can make
	// every claim on MariaDB after the outage time out, the claim errors'
	// backoff (doubling to 30 s) then filling the drain's 5 minutes with
	// nothing delivered.
	cfg.Lease = 10 * time.Second
	cfg.SweepInterval = 20 * time.Millisecond
	var logs testenv.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	r := newRelay(t, cfg)
	// The bound is for a drain that never ends: SQLite under -race on a
	// loaded machine can take minutes, its batches outliving the lease
	// now and then.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("drain: %v (stats %+v); the relay's log:\n%s", err, r.Stats(), logs.String())
	}
	if fs.injected.Load() == 0 {
		t.Fatal("no fault injected: the test tested nothing")
	}
	inFlight := cfg.BatchSize * max(cfg.MaxBatchesInFlight, relay.DefaultMaxBatchesInFlight)
	checkAllOnce(t, h, rec, ids, inFlight)
	if st := r.Stats(); st.OutcomesRefused != 0 || st.Failed != 0 {
		t.Errorf("stats %+v: an outage must not end events FAILED", st)
	}
	if len(rec.Deliveries()) == len(ids) {
		t.Errorf("no event was delivered again: the outage did not outlast the lease")
	}
}
