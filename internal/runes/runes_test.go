package runes

import "testing"

func TestTruncate(t *testing.T) {
	if got := Truncate("héllo", 2); got != "hé" {
		t.Fatalf("truncate: %q", got)
	}
}
