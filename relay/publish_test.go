package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// featuresOnly is a Store for tests that never reach the database: New
// reads its Features and nothing else.
type featuresOnly struct{ store.Store }

func (featuresOnly) Features() store.Features { return store.Features{} }

// completeResult sorts the ids of outcomes, in their order, into Applied
// (applied[id]) and Fenced (the others), as a store's Complete reports them.
func completeResult(outcomes []store.Outcome, applied map[int64]bool) store.CompleteResult {
	var res store.CompleteResult
	for _, o := range outcomes {
		if applied[o.ID] {
			res.Applied = append(res.Applied, o.ID)
		} else {
			res.Fenced = append(res.Fenced, o.ID)
		}
	}
	return res
}

type nopSink struct{}

func (nopSink) Publish(_ context.Context, m []outbox.Message) []error { return make([]error, len(m)) }
func (nopSink) Close(context.Context) error                           { return nil }

func testBatch(t *testing.T, cfg Config) *batch {
	t.Helper()
	cfg.Store, cfg.Sink = featuresOnly{}, nopSink{}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	return &batch{relay: r, claim: &store.Claim{DBTime: now}, localClaim: now, localClaimed: now}
}

func TestClassify(t *testing.T) {
	b := testBatch(t, Config{MaxRetries: 2, BackoffMin: time.Second, BackoffMax: time.Minute})
	live := context.Background()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	now := time.Now()
	cases := []struct {
		name     string
		retries  int
		err      error
		pctx     context.Context
		deadline time.Time
		want     store.OutcomeKind
		stops    bool
	}{
		{"delivered", 0, nil, live, time.Time{}, store.Delivered, false},
		{"retryable", 0, errors.New("503"), live, time.Time{}, store.Retry, true},
		{"last retry", 1, errors.New("503"), live, time.Time{}, store.Retry, true},
		{"retries exhausted", 2, errors.New("503"), live, time.Time{}, store.Failed, true},
		{"permanent", 0, outbox.Permanent(errors.New("400")), live, time.Time{}, store.Failed, true},
		{"not attempted", 0, fmt.Errorf("x: %w", outbox.ErrNotAttempted), live, time.Time{}, store.Released, true},
		{"relay stopping", 0, context.Canceled, stopped, time.Time{}, store.Released, true},
		{"deadline passed during delivery", 0, context.DeadlineExceeded, live, now.Add(-time.Millisecond), store.Expired, false},
		{"not enough time left (min_time_left)", 0, &sink.TooLateError{Route: "r", Left: time.Second, Min: 2 * time.Second}, live, now.Add(time.Second), store.Expired, false},
	}
	for _, tc := range cases {
		ev := &store.Claimed{RetryCount: tc.retries}
		o := &store.Outcome{}
		st := &aggregateState{}
		b.classify(ev, o, tc.err, st, tc.pctx, tc.deadline, now, nil)
		if o.Kind != tc.want || st.stopped != tc.stops {
			t.Errorf("%s: outcome %s (stops aggregate %v), want %s (%v)", tc.name, o.Kind, st.stopped, tc.want, tc.stops)
		}
		if tc.want == store.Retry && (o.RetryIn < 500*time.Millisecond || o.RetryIn > time.Minute) {
			t.Errorf("%s: retry in %s, outside the backoff bounds", tc.name, o.RetryIn)
		}
		if tc.want == store.Released && o.RetryIn != 0 {
			t.Errorf("%s: a release counts no retry and waits for nothing, got %s", tc.name, o.RetryIn)
		}
	}
}

func TestClassifyRetryAfterAndFollowers(t *testing.T) {
	b := testBatch(t, Config{BackoffMin: time.Second, BackoffMax: time.Minute})
	ctx := context.Background()
	st := &aggregateState{}
	head := &store.Outcome{}
	b.classify(&store.Claimed{}, head, outbox.Retryable(errors.New("429"), 42*time.Second), st, ctx, time.Time{}, time.Now(), nil)
	if head.Kind != store.Retry || head.RetryIn != 42*time.Second {
		t.Fatalf("Retry-After 42s gave %s in %s", head.Kind, head.RetryIn)
	}
	// A later event of the same aggregate waits for the head, whatever the
	// sink said about it.
	next := &store.Outcome{}
	b.classify(&store.Claimed{}, next, errors.New("also failed"), st, ctx, time.Time{}, time.Now(), nil)
	if next.Kind != store.Released || next.RetryIn != 42*time.Second || !next.Attempted {
		t.Fatalf("follower of a retried event: %+v", next)
	}
	// After a FAILED event (block policy) followers are held as BLOCKED.
	st = &aggregateState{}
	b.classify(&store.Claimed{}, &store.Outcome{}, outbox.Permanent(errors.New("400")), st, ctx, time.Time{}, time.Now(), nil)
	f := &store.Outcome{}
	b.classify(&store.Claimed{}, f, fmt.Errorf("%w", outbox.ErrNotAttempted), st, ctx, time.Time{}, time.Now(), nil)
	if f.Kind != store.Released || !f.Block || f.Attempted {
		t.Fatalf("follower of a FAILED event: %+v", f)
	}
}

func TestHeldForSpansOnlyUnrecordedBatches(t *testing.T) {
	p := &pipeline{r: &Relay{cfg: Config{MaxBatchesInFlight: 2}}, held: map[string][]heldAggregate{}}
	p.noteHeld(&batch{seq: 1, stopped: map[string]aggregateState{"x": {stopped: true, retryIn: time.Second}}})
	// Batch 2 was claimed before batch 1 was recorded: x is held.
	if got := p.heldFor(&batch{seq: 2, recordedAtClaim: 0}); !got["x"].stopped || got["x"].retryIn != time.Second {
		t.Fatalf("batch 2: held %v", got)
	}
	// So is batch 3 if it too was claimed before batch 1 was recorded:
	// asking for batch 2 forgot nothing that a later batch needs.
	if got := p.heldFor(&batch{seq: 3, recordedAtClaim: 0}); !got["x"].stopped {
		t.Fatalf("batch 3 claimed before batch 1 was recorded: held %v", got)
	}
	// Batch 4 was claimed after batch 1 was recorded: the claim saw it.
	if got := p.heldFor(&batch{seq: 4, recordedAtClaim: 1}); len(got) != 0 {
		t.Fatalf("batch 4: held %v", got)
	}
	if len(p.held) != 0 {
		t.Fatalf("recorded batches are still remembered: %v", p.held)
	}
}

func TestWithAggregateSeq(t *testing.T) {
	own := map[string]string{"traceparent": "00-1-2-01", sink.HeaderAggregateSeq: "99"}
	got := withAggregateSeq(own, 7)
	if got[sink.HeaderAggregateSeq] != "7" || got["traceparent"] != "00-1-2-01" || len(got) != 2 {
		t.Fatalf("headers %v: want the store's number 7 in place of the producer's 99, and the other headers kept", got)
	}
	if own[sink.HeaderAggregateSeq] != "99" {
		t.Fatal("the claimed event's own headers were changed")
	}
	if got := withAggregateSeq(own, 0); len(got) != 1 || got[sink.HeaderAggregateSeq] != "" {
		t.Fatalf("an event without a number: headers %v, want the producer's sequence header dropped", got)
	}
	if got := withAggregateSeq(nil, 3); got[sink.HeaderAggregateSeq] != "3" {
		t.Fatalf("no headers, seq 3: %v", got)
	}
	plain := map[string]string{"a": "b"}
	if got := withAggregateSeq(plain, 0); len(got) != 1 || got["a"] != "b" {
		t.Fatalf("nothing to change: %v", got)
	}
}

// A FIFO share out of range is refused, naming the setting.
func TestFIFOShareValidated(t *testing.T) {
	for _, share := range []float64{-0.1, 1.5} {
		_, err := New(Config{Store: featuresOnly{}, Sink: nopSink{}, FIFOShare: share})
		if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "FIFO share") {
			t.Errorf("FIFOShare %v: %v, want an invalid-config error naming the FIFO share", share, err)
		}
	}
	if _, err := New(Config{Store: featuresOnly{}, Sink: nopSink{}, FIFOShare: 1, StrictFIFO: true}); err != nil {
		t.Errorf("FIFOShare 1: %v", err)
	}
}

// deadlineSink records the deadline of the context each Publish gets.
type deadlineSink struct {
	nopSink
	got []time.Time
}

func (s *deadlineSink) Publish(ctx context.Context, m []outbox.Message) []error {
	d, _ := ctx.Deadline()
	s.got = append(s.got, d)
	return make([]error, len(m))
}

// Publishing gets 80% of the lease, counted from the claim, so that the
// outcome can still be recorded before the lease ends.
func TestPublishGetsMostOfTheLeaseNotAll(t *testing.T) {
	sink := &deadlineSink{}
	r, err := New(Config{Store: featuresOnly{}, Sink: sink, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	claimedAt := time.Now()
	b := &batch{relay: r, localClaim: claimedAt, localClaimed: claimedAt, claim: &store.Claim{DBTime: claimedAt, Events: []store.Claimed{
		{Message: outbox.Message{ID: 1, AggregateType: "payment", AggregateID: "p-1"}}}}}
	outs := b.deliver(context.Background(), nil)
	if len(outs) != 1 || outs[0].Kind != store.Delivered {
		t.Fatalf("outcomes %+v, want one delivered", outs)
	}
	if want := claimedAt.Add(8 * time.Second); len(sink.got) != 1 || !sink.got[0].Equal(want) {
		t.Fatalf("the sink's context had deadlines %v, want one at the claim + 80%% of the lease (%v)", sink.got, want)
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"abc", "abc"}, {"abcd", "abcd"}, {"abcde", "abcd..."},
	} {
		if got := truncate(tc.in, 4); got != tc.want {
			t.Errorf("truncate(%q, 4) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
