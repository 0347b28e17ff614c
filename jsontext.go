package outbox

import (
	"fmt"
	"unicode/utf8"
)

// payloadTextProblem reports why a payload that is valid JSON still cannot
// be stored and delivered as the producer wrote it, or "" if it can: bytes
// that are not UTF-8 (PostgreSQL and MariaDB refuse them, SQLite would keep
// them and the relay would send a body that is not JSON), the escape
// \u0000 (no database stores it in a JSON column) and \u escapes of lone
// UTF-16 surrogates, which name no character (PostgreSQL refuses them;
// a JSON decoder turns them into U+FFFD, silently changing the payload).
// b must be valid JSON.
func payloadTextProblem(b []byte) string {
	if !utf8.Valid(b) {
		return fmt.Sprintf("is not valid UTF-8 (the first bad byte is at offset %d): encode the payload as UTF-8", invalidUTF8Offset(b))
	}
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(b) && b[i+1] == 'u' {
				r, ok := hex4(b, i+2)
				if !ok {
					i++
					continue
				}
				switch {
				case r == 0:
					return `contains the escape \u0000, which the databases cannot store in JSON columns`
				case r >= 0xD800 && r <= 0xDBFF:
					if lowSurrogateAt(b, i+6) {
						i += 11 // both escapes
						continue
					}
					return fmt.Sprintf(`contains the escape \u%04x, a lone UTF-16 surrogate that is no character (pair it with a low surrogate \udc00-\udfff, or write the character itself)`, r)
				case r >= 0xDC00 && r <= 0xDFFF:
					return fmt.Sprintf(`contains the escape \u%04x, a lone UTF-16 surrogate that is no character (it must follow a high surrogate \ud800-\udbff)`, r)
				}
				i += 5
				continue
			}
			i++ // skip the escaped character
		}
	}
	return ""
}

// lowSurrogateAt reports whether b holds the escape \uDC00-\uDFFF at i.
func lowSurrogateAt(b []byte, i int) bool {
	if i+1 >= len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return false
	}
	r, ok := hex4(b, i+2)
	return ok && r >= 0xDC00 && r <= 0xDFFF
}

// hex4 reads four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// invalidUTF8Offset returns the offset of the first byte of b that does not
// start a valid UTF-8 sequence, or len(b).
func invalidUTF8Offset(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}
