package wait

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTB records a Fatalf instead of stopping the test.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(f) // stop the wait, as t.Fatalf stops the test's goroutine
}

func run(f *fakeTB, body func()) {
	defer func() {
		if r := recover(); r != nil && r != f {
			panic(r)
		}
	}()
	body()
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	Until(t, time.Minute, "the third check", func() (bool, error) {
		if calls.Add(1) < 3 {
			return false, errors.New("not yet")
		}
		return true, nil
	})
	if n := calls.Load(); n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

func TestUntilFailsWithWhatAndTheLastError(t *testing.T) {
	f := &fakeTB{TB: t}
	run(f, func() {
		Until(f, 30*time.Millisecond, "the impossible", func() (bool, error) { return false, errors.New("connection refused") })
	})
	if !strings.Contains(f.failed, "the impossible") || !strings.Contains(f.failed, "connection refused") {
		t.Fatalf("failure %q, want it to name what was awaited and the last error", f.failed)
	}
}

func TestForFailsWithWhat(t *testing.T) {
	f := &fakeTB{TB: t}
	run(f, func() { For(f, 30*time.Millisecond, "the impossible", func() bool { return false }) })
	if !strings.Contains(f.failed, "the impossible") || strings.Contains(f.failed, "last error") {
		t.Fatalf("failure %q, want it to name what was awaited and no error", f.failed)
	}
}

func TestWhileProgressingOutlastsIdleWhileTheCounterGrows(t *testing.T) {
	var calls atomic.Int64
	start := time.Now()
	// The counter grows on every check, so the 50 ms idle bound never
	// ends the wait; it ends once 200 ms have passed and cond says done.
	WhileProgressing(t, 50*time.Millisecond, time.Minute, "a slow drain", func() (bool, int64, error) {
		n := calls.Add(1)
		return time.Since(start) > 200*time.Millisecond, n, nil
	})
	if time.Since(start) < 200*time.Millisecond {
		t.Fatalf("returned after %s, before cond said done", time.Since(start))
	}
}

func TestWhileProgressingFailsWhenTheCounterStalls(t *testing.T) {
	f := &fakeTB{TB: t}
	run(f, func() {
		WhileProgressing(f, 30*time.Millisecond, time.Minute, "a stalled drain", func() (bool, int64, error) { return false, 7, nil })
	})
	if !strings.Contains(f.failed, "a stalled drain") || !strings.Contains(f.failed, "progress 7") || !strings.Contains(f.failed, "30ms without progress") {
		t.Fatalf("failure %q, want what was awaited, the progress and the idle bound", f.failed)
	}
}

func TestWhileProgressingFailsAtTheLimit(t *testing.T) {
	f := &fakeTB{TB: t}
	var calls atomic.Int64
	run(f, func() {
		WhileProgressing(f, time.Minute, 50*time.Millisecond, "an endless drain", func() (bool, int64, error) {
			return false, calls.Add(1), errors.New("deadlock found")
		})
	})
	if !strings.Contains(f.failed, "an endless drain") || !strings.Contains(f.failed, "50ms in all") || !strings.Contains(f.failed, "deadlock found") {
		t.Fatalf("failure %q, want what was awaited, the overall bound and the last error", f.failed)
	}
}
