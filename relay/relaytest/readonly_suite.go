package relaytest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/storetest"
)

// errReadOnly is what PostgreSQL answers a write on a former primary; it
// is not marked store.ErrRefused, as no backend marks it.
var errReadOnly = errors.New("ERROR: cannot execute UPDATE in a read-only transaction (SQLSTATE 25006)")

// readOnlyStore is a database that turns read-only for a while: its
// writes (Complete, Claim, Sweep) fail, its reads (GetEvent) succeed. It
// turns writable again after window, or sooner, right after it failed the
// second write of a single outcome: the moment a relay that took the
// failures for a refusal of the data would be recording the events one by
// one, and would then store its FAILED replacements.
type readOnlyStore struct {
	store.Store
	window time.Duration

	mu       sync.Mutex
	until    time.Time // zero: writable, and never read-only yet
	singles  int
	injected atomic.Int64
}

// turnReadOnly starts the read-only window, once.
func (s *readOnlyStore) turnReadOnly() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.until.IsZero() {
		s.until = time.Now().Add(s.window)
	}
}

// write reports whether a write of outcomes outcomes (0: not a
// completion) fails.
func (s *readOnlyStore) write(outcomes int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !time.Now().Before(s.until) {
		return nil
	}
	s.injected.Add(1)
	if outcomes == 1 {
		if s.singles++; s.singles == 2 {
			s.until = time.Now() // writable again from the next write
		}
	}
	return errReadOnly
}

func (s *readOnlyStore) Complete(ctx context.Context, req store.CompleteRequest) (store.CompleteResult, error) {
	if err := s.write(len(req.Outcomes)); err != nil {
		return store.CompleteResult{}, err
	}
	return s.Store.Complete(ctx, req)
}

func (s *readOnlyStore) Claim(ctx context.Context, req store.ClaimRequest) (*store.Claim, error) {
	if err := s.write(0); err != nil {
		return nil, err
	}
	return s.Store.Claim(ctx, req)
}

func (s *readOnlyStore) Sweep(ctx context.Context, req store.SweepRequest) (store.SweepResult, error) {
	if err := s.write(0); err != nil {
		return store.SweepResult{}, err
	}
	return s.Store.Sweep(ctx, req)
}

// testReadOnlyDatabase: the database turns read-only right after a batch
// was sent (a failover's former primary) and writable again after longer
// than the lease. A write that fails while reads succeed is not a refusal
// of the events' data: the relay retries it until the lease ends, the
// reaper returns the events, and they are delivered again. Nothing ends
// FAILED or BLOCKED, nothing is lost, the order per aggregate holds.
func testReadOnlyDatabase(t *testing.T, h *storetest.Harness) {
	ids := faultEvents(t, h, 200)
	ro := &readOnlyStore{Store: h.Store, window: 6 * time.Second}
	rec := &Recorder{Name: "sink", Fail: func(outbox.Message) error {
		ro.turnReadOnly()
		return nil
	}}
	cfg := testConfig(h, rec, "read-only")
	cfg.Store = ro
	cfg.BatchSize = 20
	cfg.Lease = 4 * time.Second
	cfg.SweepInterval = 20 * time.Millisecond
	var logs testenv.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	r := newRelay(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("drain: %v (stats %+v); the relay's log:\n%s", err, r.Stats(), logs.String())
	}
	if ro.injected.Load() == 0 {
		t.Fatal("no write failed: the test tested nothing")
	}
	if st := r.Stats(); st.OutcomesRefused != 0 || st.Failed != 0 {
		t.Errorf("stats %+v: a read-only database must not end events FAILED", st)
	}
	for _, status := range []outbox.Status{outbox.StatusFailed, outbox.StatusBlocked} {
		if n := storetest.CountStatus(t, h.Store, status); n != 0 {
			t.Errorf("%d events %s after a read-only database", n, status)
		}
	}
	inFlight := cfg.BatchSize * max(cfg.MaxBatchesInFlight, relay.DefaultMaxBatchesInFlight)
	checkAllOnce(t, h, rec, ids, inFlight)
	if lines := logs.Lines("smaller groups"); len(lines) > 0 {
		t.Errorf("the relay took a read-only database for a refusal of the data:\n%s", strings.Join(lines, "\n"))
	}
}
