package destconfig

import (
	"path"
	"strings"
)

// Pattern is the condition of a route on one field (event_type or
// aggregate_type): a list of alternatives, each an exact value or a glob
// in the syntax of [path.Match] ("*" for any run of characters except
// '/', "?" for one, "[a-c]" for a class, "\" to escape). It matches a
// value when any alternative does. The zero Pattern (the key left out of
// match:) matches every value.
type Pattern struct {
	alternatives []string
}

// Any reports whether the pattern matches every value (it was left out).
func (p Pattern) Any() bool { return len(p.alternatives) == 0 }

// Alternatives returns the values and globs of the pattern as written.
func (p Pattern) Alternatives() []string { return append([]string(nil), p.alternatives...) }

// Match reports whether v matches the pattern.
func (p Pattern) Match(v string) bool {
	if p.Any() {
		return true
	}
	for _, a := range p.alternatives {
		if a == v {
			return true
		}
		// Checked when the file was read: a malformed glob never gets here.
		if ok, _ := path.Match(a, v); ok {
			return true
		}
	}
	return false
}

// String writes the pattern as in the file: a value, or [a, b] for a list.
func (p Pattern) String() string {
	switch len(p.alternatives) {
	case 0:
		return "*any*"
	case 1:
		return p.alternatives[0]
	}
	return "[" + strings.Join(p.alternatives, ", ") + "]"
}
