package sinkkit

import (
	"github.com/txoutbox/outbox/sink"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// mask replaces a password in a URL quoted by an error.
const mask = "xxxxx"

// RedactURL returns a sink URL as errors and logs may show it: the
// credentials of every server in it masked (user:password as user:xxxxx,
// a lone user or token as xxxxx) and the query and fragment, which may
// carry tokens, replaced by "?...". It never parses the URL, so a URL that
// does not parse (a password with a stray '@', '/' or '#') is masked too:
// everything from a "://" (or the start) to the last '@' before the next
// "://" is credentials.
func RedactURL(raw string) string {
	var b strings.Builder
	rest := raw
	for {
		server, after, more := strings.Cut(rest, "://")
		if at := strings.LastIndexByte(server, '@'); at >= 0 {
			if user, _, ok := strings.Cut(server[:at], ":"); ok {
				b.WriteString(user + ":" + mask)
			} else {
				b.WriteString(mask)
			}
			server = server[at:]
		}
		b.WriteString(server)
		if !more {
			break
		}
		b.WriteString("://")
		rest = after
	}
	s := b.String()
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i] + "?..."
	}
	return s
}

// URLOptions reads the options in the query of a sink URL, e.g.
// ?topic=x&linger=5ms, into a Config: one typed read per option, each
// storing the value when the option is given and well formed. The first
// problem (a malformed query, an option given twice, a value of the wrong
// type) sticks: later reads do nothing and [URLOptions.Err] returns it.
// Once every option has been read, Err also reports an option that no read
// asked for. Errors match [outbox.ErrInvalidConfig] and quote the URL with
// [RedactURL], never its password or query values.
type URLOptions struct {
	sink, raw string
	values    url.Values
	names     []string // the options read, in order
	err       error
}

// NewURLOptions returns a reader for rawURL, a URL of the sink named
// sinkName (e.g. "kafka sink"). Call Parse with its query.
func NewURLOptions(sinkName, rawURL string) *URLOptions {
	return &URLOptions{sink: sinkName, raw: rawURL}
}

// Errorf returns an error about the URL: "<outbox.ErrInvalidConfig>: kafka
// sink: URL "kafka://..." <message>".
func (o *URLOptions) Errorf(format string, args ...any) error {
	return sink.Invalid(o.sink, "URL %s: "+format, append([]any{strconv.Quote(RedactURL(o.raw))}, args...)...)
}

// Parse reads the raw query (the part after '?').
func (o *URLOptions) Parse(rawQuery string) {
	v, err := url.ParseQuery(rawQuery)
	if err != nil {
		o.fail("has a malformed query: %v", err)
		return
	}
	o.values = v
}

func (o *URLOptions) fail(format string, args ...any) {
	if o.err == nil {
		o.err = o.Errorf(format, args...)
	}
}

// value returns the value of option name, and whether it was given once
// (given twice is an error).
func (o *URLOptions) value(name string) (string, bool) {
	o.names = append(o.names, name)
	vs := o.values[name]
	switch {
	case o.err != nil || len(vs) == 0:
		return "", false
	case len(vs) > 1:
		o.fail("option %s is given %d times: keep one", name, len(vs))
		return "", false
	}
	return vs[0], true
}

// String stores option name in *dst; it reports whether it was given.
func (o *URLOptions) String(name string, dst *string) bool {
	v, ok := o.value(name)
	if ok {
		*dst = v
	}
	return ok
}

// Int stores option name, a whole number, in *dst.
func (o *URLOptions) Int(name string, dst *int) bool { return readInt(o, name, dst, false) }

// PositiveInt is Int for a number that must be 1 or more.
func (o *URLOptions) PositiveInt(name string, dst *int) bool { return readInt(o, name, dst, true) }

// Int64 is Int for an int64.
func (o *URLOptions) Int64(name string, dst *int64) bool { return readInt(o, name, dst, false) }

func readInt[T int | int64](o *URLOptions, name string, dst *T, positive bool) bool {
	v, ok := o.value(name)
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil || int64(T(n)) != n:
		o.fail("option %s=%q is not a whole number", name, v)
		return false
	case positive && n <= 0:
		o.fail("option %s=%q is not a positive whole number", name, v)
		return false
	}
	*dst = T(n)
	return true
}

// Duration stores option name, a duration such as 5s, in *dst.
func (o *URLOptions) Duration(name string, dst *time.Duration) bool {
	return o.duration(name, dst, false)
}

// PositiveDuration is Duration for a duration that must be above zero.
func (o *URLOptions) PositiveDuration(name string, dst *time.Duration) bool {
	return o.duration(name, dst, true)
}

func (o *URLOptions) duration(name string, dst *time.Duration, positive bool) bool {
	v, ok := o.value(name)
	if !ok {
		return false
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		o.fail("option %s=%q is not a duration such as 5s or 250ms", name, v)
		return false
	case positive && d <= 0:
		o.fail("option %s=%q is not a positive duration such as 5s or 250ms", name, v)
		return false
	}
	*dst = d
	return true
}

// Bool stores option name, true or false (or 1, 0, t, f ...), in *dst.
func (o *URLOptions) Bool(name string, dst *bool) bool {
	v, ok := o.value(name)
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		o.fail("option %s=%q is not true or false", name, v)
		return false
	}
	*dst = b
	return true
}

// Keep returns the options among names that are given, unread, for a
// client library that reads them itself.
func (o *URLOptions) Keep(names ...string) url.Values {
	kept := url.Values{}
	for _, name := range names {
		if v, ok := o.value(name); ok {
			kept.Set(name, v)
		}
	}
	return kept
}

// Err returns the first problem met, or else an error naming an option
// that no read asked for, or nil. Call it after the last read.
func (o *URLOptions) Err() error {
	if o.err != nil {
		return o.err
	}
	var unknown []string
	for name := range o.values {
		if !slices.Contains(o.names, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	use := strings.Join(o.names, ", ")
	if n := len(o.names); n > 1 {
		use = strings.Join(o.names[:n-1], ", ") + " or " + o.names[n-1]
	}
	return o.Errorf("unknown option %q: use %s", unknown[0], use)
}
