// Package runes cuts text at a number of runes, never inside a UTF-8
// sequence. The store backends and the admin dashboard use it.
package runes

// Truncate keeps the first n characters of s, as PostgreSQL's left()
// does; the other backends bound error texts and relay names with it.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}
