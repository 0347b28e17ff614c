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
