package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

var errConflict = errors.New("conflict")

func policy(retries, giveUps, cancels *int) Policy {
	return Policy{
		Attempts: 3, First: time.Millisecond, Max: 2 * time.Millisecond, Jitter: true,
		Retryable: func(err error) bool { return errors.Is(err, errConflict) },
		OnRetry:   func(error, int, time.Duration) { *retries++ },
		OnGiveUp:  func(error, int) { *giveUps++ },
		OnCancel:  func(error) { *cancels++ },
	}
}

func TestDo(t *testing.T) {
	var retries, giveUps, cancels int
	p := policy(&retries, &giveUps, &cancels)
	calls := 0
	if err := p.Do(context.Background(), func() error {
		calls++
		if calls < 3 {
			return errConflict
		}
		return nil
	}); err != nil || calls != 3 || retries != 2 || giveUps != 0 {
		t.Fatalf("err %v after %d calls, %d retries, %d give-ups", err, calls, retries, giveUps)
	}

	calls, retries = 0, 0
	if err := p.Do(context.Background(), func() error { calls++; return errConflict }); !errors.Is(err, errConflict) ||
		calls != 3 || retries != 2 || giveUps != 1 {
		t.Fatalf("persistent conflict: %v after %d calls, %d retries, %d give-ups", err, calls, retries, giveUps)
	}

	other := errors.New("other")
	calls = 0
	if err := p.Do(context.Background(), func() error { calls++; return other }); err != other || calls != 1 {
		t.Fatalf("other error: %v after %d calls", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls, giveUps = 0, 0
	if err := p.Do(ctx, func() error { calls++; return errConflict }); err == nil || calls != 1 || giveUps != 1 || cancels != 0 {
		t.Fatalf("cancelled: %v after %d calls, %d give-ups, %d cancels", err, calls, giveUps, cancels)
	}

	p.First, p.Max = time.Hour, time.Hour
	ctx, cancel = context.WithCancel(context.Background())
	calls, cancels = 0, 0
	p.OnRetry = func(error, int, time.Duration) { cancel() }
	if err := p.Do(ctx, func() error { calls++; return errConflict }); !errors.Is(err, errConflict) || calls != 1 || cancels != 1 {
		t.Fatalf("cancelled during the wait: %v after %d calls, %d cancels", err, calls, cancels)
	}
}

// TestWaitsComeFromBackoff checks the waits between runs: the delay
// doubles from First up to Max, and Jitter draws each wait from
// [delay/2, delay), internal/backoff's equal jitter.
func TestWaitsComeFromBackoff(t *testing.T) {
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond}
	for _, jitter := range []bool{false, true} {
		var waits []time.Duration
		p := Policy{
			Attempts: 5, First: time.Millisecond, Max: 4 * time.Millisecond, Jitter: jitter,
			Retryable: func(err error) bool { return errors.Is(err, errConflict) },
			OnRetry:   func(_ error, _ int, wait time.Duration) { waits = append(waits, wait) },
		}
		if err := p.Do(context.Background(), func() error { return errConflict }); !errors.Is(err, errConflict) {
			t.Fatalf("jitter %v: %v", jitter, err)
		}
		if len(waits) != len(want) {
			t.Fatalf("jitter %v: waits %v, want %d of them", jitter, waits, len(want))
		}
		for i, d := range want {
			if !jitter && waits[i] != d || jitter && (waits[i] < d/2 || waits[i] >= d) {
				t.Errorf("jitter %v: wait %d = %s, want %s (jittered: within [%s, %s))", jitter, i+1, waits[i], d, d/2, d)
			}
		}
	}
}
