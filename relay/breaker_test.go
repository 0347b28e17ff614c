package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	t.Run("no success for FailingFor", func(t *testing.T) {
		w := &faultWindow{}
		for i := range failingForFaults {
			if trip, _ := w.trips(now, cfg); trip {
				t.Fatalf("tripped after %d faults at one moment", i)
			}
			w.add(now, cfg.Window, true)
		}
		if trip, why := w.trips(now, cfg); trip {
			t.Fatalf("%d faults at one moment (one batch) tripped it: %s", failingForFaults, why)
		}
		later := now.Add(cfg.FailingFor)
		w.add(later, cfg.Window, true)
		if trip, why := w.trips(later, cfg); !trip || !strings.Contains(why, "no attempt succeeded for 2s") {
			t.Fatalf("faults and no success for %s: trip=%v %q", cfg.FailingFor, trip, why)
		}
		w.add(later, cfg.Window, false)
		if trip, why := w.trips(later, cfg); trip {
			t.Fatalf("a success did not end the count: %s", why)
		}
	})
	t.Run("failed batches in a row", func(t *testing.T) {
		w := &faultWindow{}
		batch := func(faults, attempts int) {
			for i := range attempts {
				w.add(now, cfg.Window, i < faults)
			}
			w.batchDone(faults, attempts)
		}
		batch(3, 3)
		if trip, why := w.trips(now, cfg); trip {
			t.Fatalf("one failed batch of 3 tripped it: %s", why)
		}
		batch(3, 3)
		if trip, why := w.trips(now, cfg); !trip || !strings.Contains(why, "of 2 batches in a row") {
			t.Fatalf("two failed batches of 3: trip=%v %q", trip, why)
		}
		w = &faultWindow{}
		batch(6, 6)
		if trip, why := w.trips(now, cfg); !trip || !strings.Contains(why, "(6 attempts, none succeeded)") {
			t.Fatalf("one failed batch of 6: trip=%v %q", trip, why)
		}
		w = &faultWindow{}
		batch(3, 3)
		batch(2, 3) // a success between: no run
		batch(3, 3)
		if trip, why := w.trips(now, cfg); trip {
			t.Fatalf("failed batches with a success between tripped it: %s", why)
		}
		w = &faultWindow{}
		batch(1, 1)
		batch(2, 2)
		if trip, why := w.trips(now, cfg); trip {
			t.Fatalf("failed batches of 3 attempts in all tripped it: %s", why)
		}
	})
	t.Run("sparse faults are no outage", func(t *testing.T) {
		w := &faultWindow{}
		at := now
		for range 5 {
			w.add(at, cfg.Window, true)
			at = at.Add(cfg.Window + time.Second)
		}
		if trip, why := w.trips(at, cfg); trip {
			t.Fatalf("one fault per window tripped it: %s", why)
		}
	})
	t.Run("a batch's neighbours are not a row", func(t *testing.T) {
		// One in five faulty, results in one batch in random order, many
		// batches: the old rule (3 in a row) tripped on this.
		w := &faultWindow{}
		rng := rand.New(rand.NewPCG(7, 9))
		at := now
		for range 200 {
			for range 200 {
				w.add(at, cfg.Window, rng.IntN(5) == 0)
				if trip, why := w.trips(at, cfg); trip {
					t.Fatalf("20%% random faults tripped it: %s", why)
				}
			}
			at = at.Add(50 * time.Millisecond)
		}
	})
	t.Run("a slow flaky route needs a longer run", func(t *testing.T) {
		// Two attempts a second, one in five faulty: the faults in a row
		// that open it are as many as such noise strings together less
		// than once in 10,000 runs (6), not 3.
		w := &faultWindow{}
		at := now
		for i := range 40 {
			w.add(at, cfg.Window, i%5 == 1)
			at = at.Add(500 * time.Millisecond)
		}
		for i := range 5 {
			w.add(at, cfg.Window, true)
			if trip, why := w.trips(at, cfg); trip {
				t.Fatalf("%d faults in a row over %s on a route failing 1 in 5 tripped it: %s",
					i+1, at.Sub(w.failingSince), why)
			}
			at = at.Add(time.Second)
		}
		w.add(at, cfg.Window, true)
		if trip, why := w.trips(at, cfg); !trip || !strings.Contains(why, "6 attempts met a destination fault") {
			t.Fatalf("6 faults in a row over %s: trip=%v %q", at.Sub(w.failingSince), trip, why)
		}
	})
	// A healthy route opens on 3 faults over FailingFor, also when its
	// outage began with mixed results (faults interrupted by a last
	// success): those are no history of noise.
	for _, tc := range []struct {
		name  string
		start []bool // results between the successes and the run of 3 faults
	}{
		{"a healthy route needs 3", nil},
		{"an outage's first moments are not noise", []bool{true, true, false, true, true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &faultWindow{}
			at := now
			for range 40 {
				w.add(at, cfg.Window, false)
				at = at.Add(100 * time.Millisecond)
			}
			for _, fault := range tc.start {
				w.add(at, cfg.Window, fault)
				at = at.Add(200 * time.Millisecond)
			}
			for range failingForFaults {
				w.add(at, cfg.Window, true)
				at = at.Add(cfg.FailingFor / 2)
			}
			at = at.Add(-cfg.FailingFor / 2)
			if trip, why := w.trips(at, cfg); !trip {
				t.Fatalf("3 faults over %s after %v did not trip it (%q)", at.Sub(w.failingSince), tc.start, why)
			}
		})
	}
	t.Run("faults in a row needed", func(t *testing.T) {
		for _, tc := range []struct{ history, faults, want int }{
			{0, 0, 3}, {4, 4, 3}, {40, 0, 3}, {37, 3, 4}, {40, 4, 4}, {40, 8, 6}, {30, 10, 9}, {40, 16, 11}, {30, 15, 14}, {30, 30, 14},
		} {
			if got := faultsInARowNeeded(tc.history, tc.faults); got != tc.want {
				t.Errorf("faultsInARowNeeded(%d attempts, %d faults) = %d, want %d", tc.history, tc.faults, got, tc.want)
			}
		}
	})
	t.Run("rate", func(t *testing.T) {
		w := &faultWindow{}
		// ok, fault, ok, fault ...: half of them faulty, at one moment.
		for i := range cfg.MinAttempts - 1 {
			w.add(now, cfg.Window, i%2 == 1)
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
		w.failing = 0
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
	timeout := outbox.Retryable(fmt.Errorf("no response within 10s: %w", context.DeadlineExceeded), 0)
	cases := []struct {
		err   error
		cause error
		want  faultKind
	}{
		{nil, nil, attemptOK},
		{outbox.Permanent(errors.New("400 bad merchant")), nil, attemptOK},
		{errors.New("connection refused"), nil, attemptFault},
		{outbox.Retryable(errors.New("429"), time.Second), nil, attemptFault},
		{context.DeadlineExceeded, nil, attemptFault}, // the sink's own timeout
		{timeout, nil, attemptFault},
		// Unanswered when the relay's publish budget ran out: the
		// destination hangs.
		{timeout, errPublishBudget, attemptFault},
		{context.DeadlineExceeded, errPublishBudget, attemptFault},
		// Cut short by the relay itself.
		{context.Canceled, errRelayStopping, attemptNone},
		{timeout, errRelayStopping, attemptNone},
		{fmt.Errorf("interrupted: %w", context.Canceled), errRouteOpened, attemptNone},
		{fmt.Errorf("behind: %w", outbox.ErrNotAttempted), nil, attemptNone},
		{fmt.Errorf("not sent: %w: %w", outbox.ErrNotAttempted, context.DeadlineExceeded), errPublishBudget, attemptNone},
	}
	for _, c := range cases {
		if got := kindOf(c.err, c.cause); got != c.want {
			t.Errorf("kindOf(%v, %v) = %d, want %d", c.err, c.cause, got, c.want)
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
		{BreakerConfig{FailingFor: time.Millisecond}, "failing-for"},
		{BreakerConfig{FailingFor: -time.Second}, "failing-for"},
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
	for down, want := range map[time.Duration]time.Duration{
		time.Second: 5 * time.Second, 6 * time.Second: 6 * time.Second, 12 * time.Second: 12 * time.Second, time.Hour: 30 * time.Second} {
		if got := b.probeWait(down); got != want {
			t.Errorf("probe wait after a failed probe, down for %s = %s, want %s", down, got, want)
		}
	}
}
