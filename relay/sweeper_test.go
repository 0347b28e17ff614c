package relay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox/store"
)

// failingSweeper is a Store whose Sweep always fails.
type failingSweeper struct{ featuresOnly }

func (failingSweeper) Sweep(context.Context, store.SweepRequest) (store.SweepResult, error) {
	return store.SweepResult{}, errors.New("database down")
}

// A failed sweep is counted (and logged), and the sweeper keeps going.
func TestSweepErrorsCounted(t *testing.T) {
	r, err := New(Config{Store: failingSweeper{}, Sink: nopSink{}, SweepInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer runSweeper(r)()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for r.Stats().SweepErrors < 2 {
		select {
		case <-deadline:
			t.Fatalf("after 30s the relay counted %d failed sweeps, want at least 2 (one per interval)", r.Stats().SweepErrors)
		case <-tick.C:
		}
	}
}

// historyCounter is a Store that records the moves into history and the
// history's retention runs.
type historyCounter struct {
	featuresOnly
	mu      sync.Mutex
	moves   []store.HistoryMoveRequest
	cutoffs []time.Time
}

func (*historyCounter) Sweep(context.Context, store.SweepRequest) (store.SweepResult, error) {
	return store.SweepResult{}, nil
}

func (p *historyCounter) MoveToHistory(_ context.Context, req store.HistoryMoveRequest) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.moves = append(p.moves, req)
	return 0, nil
}

func (p *historyCounter) DropHistoryBefore(_ context.Context, cutoff time.Time) (store.HistoryDrop, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutoffs = append(p.cutoffs, cutoff)
	return store.HistoryDrop{Cutoff: cutoff}, nil
}

// With a retention, the sweeper moves the finished events older than it
// into the history (at its first sweep, then every purgeEvery); with
// HistoryKeepDays it also drops the months of history that ended that
// many days ago.
func TestRetentionMovesIntoHistory(t *testing.T) {
	s := &historyCounter{}
	r, err := New(Config{Store: s, Sink: nopSink{}, SweepInterval: 10 * time.Millisecond, Retention: time.Hour,
		PurgeAdopted: true, HistoryKeepDays: 30, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	defer runSweeper(r)()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		n, m := len(s.moves), len(s.cutoffs)
		s.mu.Unlock()
		if n > 0 && m > 0 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("after 30s the sweeper had moved %d times and run the history's retention %d times; want both", n, m)
		case <-tick.C:
		}
	}
	s.mu.Lock()
	req, cutoff := s.moves[0], s.cutoffs[0]
	s.mu.Unlock()
	if req.OlderThan != time.Hour || !req.Adopted {
		t.Fatalf("move %+v, want the events older than the retention, adopted rows too", req)
	}
	if want := started.AddDate(0, 0, -30); cutoff.Before(want.Add(-time.Minute)) || cutoff.After(time.Now().AddDate(0, 0, -30)) {
		t.Fatalf("history retention cutoff %s; want 30 days before now (%s)", cutoff, want)
	}
}

// Without HistoryKeepDays the history is kept: no retention runs.
func TestHistoryKeptWithoutKeepDays(t *testing.T) {
	s := &historyCounter{}
	r, err := New(Config{Store: s, Sink: nopSink{}, SweepInterval: 10 * time.Millisecond, Retention: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop := runSweeper(r)
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		s.mu.Lock()
		done = len(s.moves) > 0
		s.mu.Unlock()
		select {
		case <-deadline:
			t.Fatal("after 30s the sweeper had not moved once, with a retention set")
		case <-tick.C:
		}
	}
	stop()
	if len(s.cutoffs) != 0 {
		t.Fatalf("the history's retention ran %d times without HistoryKeepDays; want never", len(s.cutoffs))
	}
}

// A negative HistoryKeepDays is refused.
func TestNegativeHistoryKeepDaysRefused(t *testing.T) {
	_, err := New(Config{Store: &historyCounter{}, Sink: nopSink{}, HistoryKeepDays: -1})
	if err == nil || !strings.Contains(err.Error(), "history retention") {
		t.Fatalf("New with HistoryKeepDays -1: %v; want a refusal", err)
	}
}

// runSweeper starts r's sweep loop and returns the func that stops it and
// waits for it to return.
func runSweeper(r *Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.sweepLoop(ctx) }()
	return func() { cancel(); wg.Wait() }
}
