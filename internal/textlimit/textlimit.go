// Package textlimit makes the texts outbox stores (error texts, relay and
// operator names) storable by every backend: valid UTF-8, no NUL byte,
// bounded in characters and bytes. The relay cuts what it passes to a
// store with it, and the backends what they write themselves.
package textlimit

import (
	"strings"
	"unicode/utf8"
)

// MaxErrorRunes bounds the error texts a backend stores (last_error, the
// audit rows' error, dead-letter reasons where the backend bounds them), as
// PostgreSQL's left(err, 2000) does.
const MaxErrorRunes = 2000

// MaxErrorBytes bounds the UTF-8 size of a stored error text. MaxErrorRunes
// characters take at most 4 bytes each, so the bound only bites on texts
// that the rune limit already cuts; it keeps every text far below MySQL's
// TEXT column (65,535 bytes).
const MaxErrorBytes = 4 * MaxErrorRunes

// MaxRelayIDRunes bounds a relay or operator name in the audit trail
// (relay_id is VARCHAR(200) on PostgreSQL and MySQL).
const MaxRelayIDRunes = 200

// cutMark ends a text that StorableText cut.
const cutMark = "…"

// StorableText returns s in a form every backend stores unchanged, whatever
// s holds: valid UTF-8 (each byte of an invalid sequence becomes the four
// characters `\xNN`), no NUL byte (it becomes `\x00`: PostgreSQL's text
// refuses it), and at most maxRunes characters and MaxErrorBytes bytes, cut
// at a character boundary and then ended with "…". A maxRunes below 1 means
// MaxErrorRunes. A text that needs none of this is returned as it is, so
// the function can be applied again without changing anything.
//
// Every error text an outcome, a dead letter or an audit row stores (a
// sink's error, whatever a custom sink returns, an operator's reason) goes
// through it, so that recording what happened to an event can never be
// refused by the database because of the text.
func StorableText(s string, maxRunes int) string {
	if maxRunes < 1 {
		maxRunes = MaxErrorRunes
	}
	maxBytes := MaxErrorBytes
	if fitsAsIs(s, maxRunes, maxBytes) {
		return s
	}
	// Room for the cut mark, in case the text is cut.
	limitRunes, limitBytes := maxRunes-1, maxBytes-len(cutMark)
	var b strings.Builder
	b.Grow(min(len(s), maxBytes))
	runes := 0
	emit := func(piece string, n int) bool {
		if runes+n > limitRunes || b.Len()+len(piece) > limitBytes {
			return false
		}
		b.WriteString(piece)
		runes += n
		return true
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		var ok bool
		switch {
		case r == utf8.RuneError && size <= 1:
			ok = emit(escapeByte(s[i]), 4)
		case r == 0:
			ok = emit(`\x00`, 4)
		default:
			ok = emit(s[i:i+size], 1)
		}
		if !ok {
			// The rest does not fit: the text is cut here, unless what is
			// left would have fitted in the room the mark was kept for.
			if rest := s[i:]; fitsAsIs(rest, maxRunes-runes, maxBytes-b.Len()) {
				b.WriteString(rest)
				return b.String()
			}
			b.WriteString(cutMark)
			return b.String()
		}
		i += size
	}
	return b.String()
}

// ErrorText is StorableText with the limits of the error columns
// (last_error, the audit rows' error, dead-letter reasons).
func ErrorText(s string) string { return StorableText(s, MaxErrorRunes) }

// fitsAsIs reports whether s is valid UTF-8 without NUL bytes, within
// maxRunes characters and maxBytes bytes.
func fitsAsIs(s string, maxRunes, maxBytes int) bool {
	if len(s) > maxBytes || strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
		return false
	}
	return len(s) <= maxRunes || utf8.RuneCountInString(s) <= maxRunes
}

func escapeByte(c byte) string {
	const hex = "0123456789abcdef"
	return string([]byte{'\\', 'x', hex[c>>4], hex[c&0xf]})
}
