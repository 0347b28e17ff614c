package store

import "testing"

func TestTraceIDOf(t *testing.T) {
	for _, tc := range []struct{ tp, want string }{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", ""},
		{"garbage", ""},
		{"", ""},
	} {
		if got := TraceIDOf(map[string]string{"traceparent": tc.tp}); got != tc.want {
			t.Errorf("TraceIDOf(%q) = %q, want %q", tc.tp, got, tc.want)
		}
	}
}
