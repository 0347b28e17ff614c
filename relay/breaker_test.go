package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

func TestFaultWindowTrips(t *testing.T) {
	cfg := BreakerConfig{}.withDefaults()
	now := time.Unix(1_000_000, 0)
	t.Run("consecutive", func(t *testing.T) {
		w := &faultWindow{}
		for i := range cfg.ConsecutiveFailures {
			if trip, _ := w.trips(now, cfg); trip {
				t.Fatalf("tripped after %d faults in a row, want %d", i, cfg.ConsecutiveFailures)
			}
			w.add(now, cfg.Window, true)
		}
		if trip, why := w.trips(now, cfg); !trip || !strings.Contains(why, "in a row") {
			t.Fatalf("%d faults in a row: trip=%v %q", cfg.ConsecutiveFailures, trip, why)
		}
	})
	t.Run("rate", func(t *testing.T) {
		w := &faultWindow{}
		// fault, ok, fault, ok ...: never 3 in a row, half of them faulty.
		for i := range cfg.MinAttempts - 1 {
			w.add(now, cfg.Window, i%2 == 0)
		}
		if trip, _ := w.trips(now, cfg); trip {
			t.Fatal("tripped below the least number of attempts")
		}
		w.add(now, cfg.Window, true)
		if trip, why := w.trips(now, cfg); !trip || !strings.Contains(why, "within 30s") {
			t.Fatalf("half of %d attempts faulty: trip=%v %q", cfg.MinAttempts, trip, why)
		}
	})
	t.Run("old faults leave the window", func(t *testing.T) {
		w := &faultWindow{}
		for i := range 20 {
			w.add(now, cfg.Window, i%3 != 0)
		}
		w.consecutive = 0
		later := now.Add(cfg.Window + time.Second)
		if trip, _ := w.trips(later, cfg); trip {
			t.Fatal("faults older than the window still count")
		}
	})
	t.Run("successes keep it closed", func(t *testing.T) {
		w := &faultWindow{}
		for i := range 100 {
			w.add(now, cfg.Window, i%3 == 0) // a third faulty
		}
		if trip, why := w.trips(now, cfg); trip {
			t.Fatalf("a third of attempts faulty tripped it: %s", why)
		}
	})
}

func TestKindOf(t *testing.T) {
	cases := []struct {
		err  error
		pctx error
		want faultKind
	}{
		{nil, nil, attemptOK},
		{outbox.Permanent(errors.New("400 bad merchant")), nil, attemptOK},
		{errors.New("connection refused"), nil, attemptFault},
		{outbox.Retryable(errors.New("429"), time.Second), nil, attemptFault},
		{context.DeadlineExceeded, nil, attemptFault}, // the sink's own timeout
		{context.Canceled, context.Canceled, attemptNone},
		{fmt.Errorf("behind: %w", outbox.ErrNotAttempted), nil, attemptNone},
	}
	for _, c := range cases {
		if got := kindOf(c.err, c.pctx); got != c.want {
			t.Errorf("kindOf(%v, %v) = %d, want %d", c.err, c.pctx, got, c.want)
		}
	}
}

func TestDueBy(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	const lead = 1250 * time.Millisecond
	if got := dueBy(5*time.Second, time.Time{}, now, lead); got != 5*time.Second {
		t.Errorf("no deadline: %s", got)
	}
	if got := dueBy(5*time.Second, now.Add(3*time.Second), now, lead); got != 3*time.Second-lead {
		t.Errorf("deadline in 3s: %s, want the lead before it", got)
	}
	if got := dueBy(5*time.Second, now.Add(time.Second), now, lead); got != 500*time.Millisecond {
		t.Errorf("deadline in 1s: %s, want halfway to it", got)
	}
	if got := dueBy(5*time.Second, now.Add(20*time.Millisecond), now, lead); got != 50*time.Millisecond {
		t.Errorf("deadline in 20ms: %s, want the 50ms floor", got)
	}
	if got := dueBy(time.Second, now.Add(time.Minute), now, lead); got != time.Second {
		t.Errorf("deadline far away: %s, want the wait", got)
	}
	if got := dueBy(5*time.Second, now.Add(-time.Second), now, lead); got != 50*time.Millisecond {
		t.Errorf("deadline passed: %s", got)
	}
}

func TestBreakerKey(t *testing.T) {
	if got := breakerKey("payment.events"); got != "payment.events" {
		t.Errorf("short route renamed to %q", got)
	}
	long1 := "https://gateway.example/" + strings.Repeat("결", 200) + "a"
	long2 := "https://gateway.example/" + strings.Repeat("결", 200) + "b"
	k1, k2 := breakerKey(long1), breakerKey(long2)
	if k1 == k2 || len(k1) > store.MaxRouteLen || !utf8.ValidString(k1) {
		t.Errorf("long routes: %d bytes, valid %v, distinct %v", len(k1), utf8.ValidString(k1), k1 != k2)
	}
}

func TestBreakerConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  BreakerConfig
		want string
	}{
		{BreakerConfig{Window: time.Millisecond}, "window"},
		{BreakerConfig{FailureRatio: 1.5}, "failure ratio"},
		{BreakerConfig{MinAttempts: -1}, "min attempts"},
		{BreakerConfig{ConsecutiveFailures: -2}, "consecutive"},
		{BreakerConfig{OpenMin: time.Millisecond}, "open-min"},
		{BreakerConfig{OpenMin: time.Minute, OpenMax: time.Second}, "open-max"},
		{BreakerConfig{Refresh: time.Hour}, "refresh"},
	} {
		err := c.cfg.withDefaults().validate()
		if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %s", c.cfg, err, c.want)
		}
	}
	if err := (BreakerConfig{Disabled: true, Window: -1}).validate(); err != nil {
		t.Errorf("a disabled breaker's settings are not checked: %v", err)
	}
	b := &breaker{cfg: BreakerConfig{}.withDefaults()}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		if got := b.probeWait(i + 1); got != w {
			t.Errorf("probe wait after %d openings = %s, want %s", i+1, got, w)
		}
	}
}
