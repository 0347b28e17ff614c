package textlimit

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStorableText(t *testing.T) {
	korean := strings.Repeat("결제", 1500) // 3000 characters, 9000 bytes
	cases := []struct {
		name, in, want string
		max            int
	}{
		{"plain", "gateway answered 503", "gateway answered 503", 0},
		{"nul", "a\x00b", `a\x00b`, 0},
		{"invalid", "a\xffb\xc3", `a\xffb\xc3`, 0},
		{"surrogate", "\xed\xa0\x80", `\xed\xa0\x80`, 0},
		{"cut at rune", "가나다라", "가나…", 3},
		{"exact fit", "가나다", "가나다", 3},
		{"escape does not split", "ab\xff", "ab…", 4},
		{"empty", "", "", 0},
	}
	for _, c := range cases {
		if got := StorableText(c.in, c.max); got != c.want {
			t.Errorf("%s: StorableText(%q, %d) = %q, want %q", c.name, c.in, c.max, got, c.want)
		}
	}
	got := ErrorText(korean)
	if n := utf8.RuneCountInString(got); n != MaxErrorRunes {
		t.Errorf("Korean × 3000: kept %d characters, want %d", n, MaxErrorRunes)
	}
	if !strings.HasSuffix(got, "…") || !strings.HasPrefix(korean, strings.TrimSuffix(got, "…")) {
		t.Errorf("Korean × 3000: not a prefix ended with the cut mark: ...%q", got[len(got)-12:])
	}
	big := ErrorText(strings.Repeat("\U0001F4B3", 1<<18)) // 1 MiB of 4-byte characters
	if len(big) > MaxErrorBytes || !utf8.ValidString(big) {
		t.Errorf("1 MiB text: %d bytes, valid %v", len(big), utf8.ValidString(big))
	}
}

func FuzzStorableText(f *testing.F) {
	for _, s := range []string{"", "x", "a\x00b", "\xff\xfe", strings.Repeat("결", 2100), "\xed\xa0\x80"} {
		f.Add(s, 0)
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		max %= 3000
		got := StorableText(s, max)
		limit := max
		if limit < 1 {
			limit = MaxErrorRunes
		}
		if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("StorableText(%q) = %q: not storable", s, got)
		}
		if n := utf8.RuneCountInString(got); n > limit || len(got) > MaxErrorBytes {
			t.Fatalf("StorableText(%q, %d) = %d characters, %d bytes", s, max, n, len(got))
		}
		if again := StorableText(got, max); again != got {
			t.Fatalf("not stable: %q then %q", got, again)
		}
		if fitsAsIs(s, limit, MaxErrorBytes) && got != s {
			t.Fatalf("changed a storable text: %q -> %q", s, got)
		}
	})
}
