package relay

import (
	"context"
	"errors"
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
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.sweepLoop(ctx) }()
	defer func() { cancel(); wg.Wait() }()
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
