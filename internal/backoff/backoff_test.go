package backoff

import (
	"testing"
	"time"
)

func TestDelayGrowsAndCaps(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 40: time.Second} {
		for _, r := range []float64{0, 0.5, 0.999} {
			p.Rand = func() float64 { return r }
			got := p.Delay(n)
			if got < want/2 || got > want {
				t.Errorf("Delay(%d) with rand %.3f = %s, want within [%s, %s]", n, r, got, want/2, want)
			}
		}
	}
	p.Rand = func() float64 { return 0 }
	if got := p.Delay(3); got != 200*time.Millisecond {
		t.Errorf("Delay(3) at rand 0 = %s, want 200ms (half of 400ms)", got)
	}
}

func TestDelayJitters(t *testing.T) {
	p := Policy{Min: time.Second, Max: time.Minute}
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		seen[p.Delay(3)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("50 delays gave only %d distinct values; jitter is missing", len(seen))
	}
}

func TestBase(t *testing.T) {
	p := Policy{Min: 5 * time.Millisecond, Max: 500 * time.Millisecond}
	for n, want := range map[int]time.Duration{0: 5 * time.Millisecond, 1: 5 * time.Millisecond, 2: 10 * time.Millisecond, 7: 320 * time.Millisecond, 8: 500 * time.Millisecond, 100: 500 * time.Millisecond} {
		if got := p.Base(n); got != want {
			t.Errorf("Base(%d) = %s, want %s", n, got, want)
		}
	}
	if got := (Policy{}).Delay(3); got != 0 {
		t.Errorf("zero policy: Delay(3) = %s, want 0", got)
	}
}
