package mysql

import (
	"testing"
	"time"
)

// Times are written as UTC DATETIME(6) text, clamped to DATETIME's years
// 1000..9999 (the bounds themselves are in range), and read back as UTC.
func TestFormatTimeAndScanRoundTrip(t *testing.T) {
	kst := time.FixedZone("KST", 9*3600)
	cases := []struct {
		in   time.Time
		want string
	}{
		{time.Date(2031, 5, 6, 16, 8, 9, 123456789, kst), "2031-05-06 07:08:09.123456"},
		{time.Date(1000, 1, 1, 0, 0, 0, 5000, time.UTC), "1000-01-01 00:00:00.000005"},
		{time.Date(999, 12, 31, 23, 0, 0, 0, time.UTC), "1000-01-01 00:00:00"},
		{time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), "9999-12-31 23:59:59"},
		{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), "9999-12-31 23:59:59.999999"},
	}
	for _, tc := range cases {
		got := formatTime(tc.in)
		if got != tc.want {
			t.Errorf("formatTime(%v) = %q, want %q", tc.in, got, tc.want)
		}
		var n nullTime
		if err := n.Scan([]byte(got)); err != nil {
			t.Fatal(err)
		}
		if n.Time.Location() != time.UTC || n.Time.Format(tsLayout) != got {
			t.Errorf("scanning %q gave %v", got, n.Time)
		}
	}
	// A DATETIME the driver already parsed (in any zone) is taken by its wall clock.
	var n nullTime
	if err := n.Scan(time.Date(2031, 5, 6, 7, 8, 9, 0, kst)); err != nil || !n.Time.Equal(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)) {
		t.Errorf("scan of a parsed DATETIME: %v, %v", n.Time, err)
	}
	for _, zero := range []any{nil, "", "0000-00-00 00:00:00"} {
		n := nullTime{Time: time.Now()}
		if err := n.Scan(zero); err != nil || !n.Time.IsZero() {
			t.Errorf("scan of %#v: %v, %v; want the zero time", zero, n.Time, err)
		}
	}
	if v, err := (nullTime{}).Value(); v != nil || err != nil {
		t.Errorf("the zero time's value is %v, %v; want NULL", v, err)
	}
	if err := n.Scan(42); err == nil {
		t.Error("scanning an int as a time did not fail")
	}
}
