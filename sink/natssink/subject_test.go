package natssink

import (
	"strings"
	"testing"
)

func TestSubjectMatches(t *testing.T) {
	cases := []struct {
		pattern, subject string
		want             bool
	}{
		{"*.events", "payment.events", true},
		{"*.events", "payment.audit", false},
		{"*.events", "a.b.events", false},
		{"payment.>", "payment.events", true},
		{"payment.>", "payment.a.b", true},
		{"payment.>", "payment", false},
		{"payment.events", "payment.events", true},
		{"payment.events", "payment.events.x", false},
		{"a.*.c", "a.b.c", true},
	}
	for _, c := range cases {
		if got := subjectMatches(c.pattern, c.subject); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", c.pattern, c.subject, got, c.want)
		}
	}
}

func TestCheckPublishSubject(t *testing.T) {
	for _, ok := range []string{"payment.events", "a", "pay-ment.tx_1.events", "a.b$c", "zahlung.ü"} {
		if err := checkPublishSubject(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "a..b", ".a", "a.", "a.*", ">", "a\tb", "a\x00b", "a.b*c", "merchant.>", "$SYS.x", "$JS.API.x", "a.\xff", strings.Repeat("a", 1025)} {
		if err := checkPublishSubject(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := checkStreamSubject("a.>.b"); err == nil {
		t.Error("a.>.b accepted as a stream subject")
	}
}

// The cache holds stream patterns, not one entry per subject published to.
func TestKnownSubjectsStaySmall(t *testing.T) {
	var k knownSubjects
	k.add("payment.>", "merchant.events")
	for i := 0; i < 1000; i++ {
		if !k.covers("payment.tx-" + string(rune('a'+i%26)) + ".events") {
			t.Fatal("a subject under payment.> is not covered")
		}
	}
	k.add("payment.>")
	if len(k.patterns) != 2 {
		t.Fatalf("patterns = %v", k.patterns)
	}
	k.forget("payment.x")
	if k.covers("payment.y") || !k.covers("merchant.events") {
		t.Fatalf("after forget: %v", k.patterns)
	}
}
