package sqlite

import (
	"testing"
	"time"
)

// TestFormatTimeClampsAndModifierRounds pins the text of the database
// clock's arithmetic: stored times clamp to the years 1..9999 (so that the
// text still sorts) and keep years 1 and 9999 as they are, and durations
// become strftime modifiers to the millisecond, with their sign.
func TestFormatTimeClampsAndModifierRounds(t *testing.T) {
	times := []struct {
		in   time.Time
		want string
	}{
		{time.Date(0, 12, 31, 23, 59, 59, 0, time.UTC), "0001-01-01 00:00:00.000"},
		{time.Date(1, 3, 4, 5, 6, 7, 8_900_000, time.UTC), "0001-03-04 05:06:07.008"},
		{time.Date(2026, 12, 1, 17, 0, 0, 123_456_789, time.FixedZone("CET", 3600)), "2026-12-01 16:00:00.123"},
		{time.Date(9999, 6, 1, 0, 0, 0, 0, time.UTC), "9999-06-01 00:00:00.000"},
		{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), "9999-12-31 23:59:59.999"},
	}
	for _, tc := range times {
		if got := formatTime(tc.in); got != tc.want {
			t.Errorf("formatTime(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
	durations := []struct {
		in   time.Duration
		want string
	}{
		{0, "+0.000 seconds"},
		{time.Millisecond, "+0.001 seconds"},
		{1500 * time.Millisecond, "+1.500 seconds"},
		{time.Hour + 999*time.Millisecond + 999*time.Microsecond, "+3600.999 seconds"},
		{-1500 * time.Millisecond, "-1.500 seconds"},
		{-time.Millisecond, "-0.001 seconds"},
	}
	for _, tc := range durations {
		if got := modifier(tc.in); got != tc.want {
			t.Errorf("modifier(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
