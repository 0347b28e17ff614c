package sinkkit

import (
	"fmt"
	"github.com/txoutbox/outbox/sink"
	"unicode/utf8"
)

// CheckName returns why name cannot be a destination of up to maxBytes
// bytes, or "": it must be non-empty valid UTF-8 without control
// characters. Sinks add their broker's own rules.
func CheckName(name string, maxBytes int) string {
	switch {
	case name == "":
		return "it is empty"
	case len(name) > maxBytes:
		return fmt.Sprintf("it is %d bytes long, over the limit of %d", len(name), maxBytes)
	case !utf8.ValidString(name):
		return "it is not valid UTF-8"
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f || c >= 0x80 && c < 0xa0 {
			return fmt.Sprintf("it contains the control character %U", c)
		}
	}
	return ""
}

// NewCheckedRouter is [sink.NewRouterFor] that also checks, once, every route
// template without a placeholder: check returns why a destination (a
// what: "topic", "subject") is refused, or "".
func NewCheckedRouter(sinkName, what, template string, overrides map[string]string, check func(dest string) string) (*sink.Router, error) {
	r, err := sink.NewRouterFor(sinkName, template, overrides)
	if err != nil {
		return nil, err
	}
	for _, dest := range r.Literals() {
		if reason := check(dest); reason != "" {
			return nil, sink.Invalid(sinkName, "route %q is not a valid %s: %s", dest, what, reason)
		}
	}
	return r, nil
}
