package admin

import (
	"testing"
	"time"
)

// TestP99NearestRank: the p99 is the smallest publish time at least 99%
// of them are at most; none is null with a note; a list the limit cut
// says so.
func TestP99NearestRank(t *testing.T) {
	ms := func(n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = time.Duration(n-i) * time.Millisecond // newest first, not sorted
		}
		return out
	}
	for _, tc := range []struct {
		ds   []time.Duration
		want float64
	}{
		{ms(1), 1},
		{ms(100), 99},
		{ms(101), 100},
		{ms(1000), 990},
		{[]time.Duration{40 * time.Millisecond, 40 * time.Millisecond, 1500 * time.Microsecond}, 40},
	} {
		got, note := p99(tc.ds)
		if got == nil || *got != tc.want || note != "" {
			t.Errorf("p99 of %d publish times: %v %q, want %v", len(tc.ds), got, note, tc.want)
		}
	}
	if got, note := p99(nil); got != nil || note != "no delivery in the last 5 minutes" {
		t.Errorf("p99 of none: %v %q, want null", got, note)
	}
	if got, note := p99(ms(p99Limit)); got == nil || *got != 9900 || note == "" {
		t.Errorf("p99 of a list the limit cut: %v %q, want 9900 with a note", got, note)
	}
}
