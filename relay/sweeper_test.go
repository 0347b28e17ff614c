package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

// purgeCounter is a Store that counts Purge calls.
type purgeCounter struct {
	featuresOnly
	mu     sync.Mutex
	purges []store.PurgeRequest
}

func (*purgeCounter) Sweep(context.Context, store.SweepRequest) (store.SweepResult, error) {
	return store.SweepResult{}, nil
}

func (p *purgeCounter) Purge(_ context.Context, req store.PurgeRequest) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.purges = append(p.purges, req)
	return 0, nil
}

// With a retention, the sweeper purges (at its first sweep, then every
// purgeEvery), PROCESSED and EXPIRED events older than the retention.
func TestRetentionPurgeRuns(t *testing.T) {
	s := &purgeCounter{}
	r, err := New(Config{Store: s, Sink: nopSink{}, SweepInterval: 10 * time.Millisecond, Retention: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer runSweeper(r)()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		n := len(s.purges)
		s.mu.Unlock()
		if n > 0 {
			break
		}
		select {
		case <-deadline:
			t.Fatal("after 30s the sweeper had not purged once, with a retention set")
		case <-tick.C:
		}
	}
	s.mu.Lock()
	req := s.purges[0]
	s.mu.Unlock()
	if req.OlderThan != time.Hour || fmt.Sprint(req.Statuses) != "[PROCESSED EXPIRED]" {
		t.Fatalf("purge %+v, want PROCESSED and EXPIRED older than the retention", req)
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
