package relay

import (
	"sync"
	"testing"
	"time"
)

// The stamps of a relay's outcomes never go back, even when a later
// batch's clock anchor is earlier than an earlier batch's.
func TestStampsNeverGoBack(t *testing.T) {
	var m monotonicStamps
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if got := m.notBefore(base); !got.Equal(base) {
		t.Fatalf("first stamp %v, want %v", got, base)
	}
	later := base.Add(30 * time.Millisecond)
	if got := m.notBefore(later); !got.Equal(later) {
		t.Fatalf("later stamp %v, want %v", got, later)
	}
	// A batch anchored 20 ms early asks for a time before the last stamp.
	if got := m.notBefore(base.Add(10 * time.Millisecond)); !got.Equal(later) {
		t.Fatalf("stamp behind the last one = %v, want it held at %v", got, later)
	}
	if got := m.notBefore(base.Add(10 * time.Millisecond)); got.Location() != time.UTC {
		t.Fatalf("stamp lost its location: %v", got.Location())
	}

	// Concurrent batches: each goroutine's own stamps never go back.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prev := time.Time{}
			for i := range 1000 {
				jitter := time.Duration((i*7+g*13)%50) * time.Millisecond
				got := m.notBefore(later.Add(time.Duration(i)*time.Millisecond - jitter))
				if got.Before(prev) {
					t.Errorf("goroutine %d: stamp %v before the previous %v", g, got, prev)
					return
				}
				prev = got
			}
		}()
	}
	wg.Wait()
}
