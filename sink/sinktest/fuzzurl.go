package sinktest

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

// URLParser is what a fuzz target of a sink's URL parser checks; see
// CheckURL.
type URLParser struct {
	// Sink names the sink as its errors do ("nats sink").
	Sink string
	// Parse is the sink's ParseURL, its Config returned as any.
	Parse func(raw string) (any, error)
	// Router validates an accepted Config as New would and returns its
	// router; Destination checks a destination as the broker would. An
	// accepted route must give PlainMessage a destination the broker
	// takes. Nil for a sink without routes.
	Router      func(cfg any) (*sink.Router, error)
	Destination func(dest string) error
	// Check runs further checks on an accepted Config; nil for none.
	Check func(cfg any) error
}

// FuzzURLs is a sink's URL fuzz target: f.Fuzz over (rest, password)
// with FuzzURL, seeded with seeds as rest.
func FuzzURLs(f *testing.F, p URLParser, scheme string, seeds ...string) {
	for _, rest := range seeds {
		f.Add(rest, "s3cret-pw")
	}
	f.Fuzz(func(t *testing.T, rest, password string) { FuzzURL(t, p, scheme, rest, password) })
}

// CheckURL checks one URL against the properties every sink's URL parser
// keeps: it never panics; a refused URL gets an error that matches
// outbox.ErrInvalidConfig, names the sink and says more than that, and
// never holds secret (the password the URL was written with; "" if none);
// an accepted URL parses again to an equal Config, which passes p.Check.
func CheckURL(t *testing.T, p URLParser, raw, secret string) {
	t.Helper()
	cfg, err := p.Parse(raw)
	if err != nil {
		msg := err.Error()
		prefix := outbox.ErrInvalidConfig.Error() + ": " + p.Sink + ": "
		switch {
		case !errors.Is(err, outbox.ErrInvalidConfig):
			t.Fatalf("ParseURL(%q): %v does not match ErrInvalidConfig", raw, err)
		case !strings.HasPrefix(msg, prefix) || len(msg) < len(prefix)+10:
			t.Fatalf("ParseURL(%q): %q does not start with %q and say what is wrong", raw, msg, prefix)
		case secret != "" && strings.Contains(msg, secret):
			t.Fatalf("ParseURL(%q): the error %q shows the password %q", raw, msg, secret)
		}
		return
	}
	again, err := p.Parse(raw)
	if err != nil || !reflect.DeepEqual(cfg, again) {
		t.Fatalf("ParseURL(%q) is not deterministic: %+v, then %+v (%v)", raw, cfg, again, err)
	}
	if p.Router != nil {
		r, err := p.Router(cfg)
		if err != nil {
			t.Fatalf("ParseURL(%q) accepted %+v, which the sink refuses: %v", raw, cfg, err)
		}
		if dest := r.Route(PlainMessage()); p.Destination != nil {
			if err := p.Destination(dest); err != nil {
				t.Fatalf("ParseURL(%q) accepted a route that gives %q, which the broker refuses: %v", raw, dest, err)
			}
		}
	}
	if p.Check != nil {
		if err := p.Check(cfg); err != nil {
			t.Fatalf("ParseURL(%q) accepted %+v, which the sink's own checks refuse: %v", raw, cfg, err)
		}
	}
}

// FuzzURL is the body of a sink's URL fuzz target: it checks scheme+rest,
// and, when password is a usable one (at least 6 bytes, with no "://"),
// scheme+"app:"+password+"@"+rest with the password as the secret. The
// password is wrapped as "Zq"+password+"9x" so that it cannot be a word
// of an error message; rest must not hold it.
func FuzzURL(t *testing.T, p URLParser, scheme, rest, password string) {
	t.Helper()
	CheckURL(t, p, scheme+rest, "")
	pw := "Zq" + password + "9x"
	if len(pw) >= 8 && !strings.Contains(pw, "://") && !strings.Contains(rest, "Zq") {
		CheckURL(t, p, scheme+"app:"+pw+"@"+rest, pw)
	}
}

// PlainMessage is the message an accepted route must give a destination
// the broker takes: the one the sink's own check at New routes
// (sink.ProbeMessage). Longer field values can make a longer name that the
// broker refuses; the sink then fails that event alone, at Publish.
func PlainMessage() *outbox.Message { return sink.ProbeMessage("payment") }
