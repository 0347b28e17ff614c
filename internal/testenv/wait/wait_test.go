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
