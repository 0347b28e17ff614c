package sinkkit

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Limits bound the traffic to one route (one destination: a topic, a
// subject, an endpoint). The zero value limits nothing.
type Limits struct {
	// Rate is the most messages per second, on average, sent to the
	// route: a token bucket that fills at Rate and holds Burst. 0: no
	// rate limit.
	Rate float64
	// Burst is how many messages may go at once after a quiet spell.
	// 0 means a tenth of a second's worth of Rate (at least 1).
	Burst int
	// MaxInFlight is the most messages of the route being published at
	// once (sent and not yet answered), across Publish calls. 0: no cap.
	MaxInFlight int
	// MinTimeLeft is the least time before its deadline a message must
	// have to be sent to the route: one with less is not sent, and the
	// relay ends it EXPIRED with the reason "not enough time left: 1.2 s <
	// 2 s" (a request the receiver cannot finish in time is not worth
	// sending). 0: none. Messages without a deadline are not affected.
	MinTimeLeft time.Duration
}

// IsZero reports whether l limits nothing.
func (l Limits) IsZero() bool { return l.Rate == 0 && l.MaxInFlight == 0 && l.MinTimeLeft == 0 }

// withDefaults fills Burst.
func (l Limits) withDefaults() Limits {
	if l.Rate > 0 && l.Burst == 0 {
		l.Burst = max(1, int(math.Ceil(l.Rate/10)))
	}
	return l
}

// Validate reports a negative or impossible limit.
func (l Limits) Validate() error {
	switch {
	case l.Rate < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0):
		return fmt.Errorf("rate %v is not a positive number of messages per second", l.Rate)
	case l.Burst < 0:
		return fmt.Errorf("burst %d is negative", l.Burst)
	case l.Burst > 0 && l.Rate == 0:
		return fmt.Errorf("burst %d without a rate: give rate= too (e.g. rate=200/s)", l.Burst)
	case l.MaxInFlight < 0:
		return fmt.Errorf("max_in_flight %d is negative", l.MaxInFlight)
	case l.MinTimeLeft < 0:
		return fmt.Errorf("min_time_left %s is negative", l.MinTimeLeft)
	}
	return nil
}

// String renders l as the options that set it, e.g.
// "rate=200/s,burst=50,max_in_flight=32" ("unlimited" for the zero value).
func (l Limits) String() string {
	l = l.withDefaults()
	var parts []string
	if l.Rate > 0 {
		parts = append(parts, "rate="+strconv.FormatFloat(l.Rate, 'f', -1, 64)+"/s", "burst="+strconv.Itoa(l.Burst))
	}
	if l.MaxInFlight > 0 {
		parts = append(parts, "max_in_flight="+strconv.Itoa(l.MaxInFlight))
	}
	if l.MinTimeLeft > 0 {
		parts = append(parts, "min_time_left="+l.MinTimeLeft.String())
	}
	if len(parts) == 0 {
		return "unlimited"
	}
	return strings.Join(parts, ",")
}

// ParseRate reads a rate such as "200/s", "1000/m", "5/h" or "10/100ms"
// and returns it in messages per second.
func ParseRate(v string) (float64, error) {
	num, per, ok := strings.Cut(v, "/")
	n, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || n <= 0 || math.IsInf(n, 0) || math.IsNaN(n) {
		return 0, fmt.Errorf("rate %q: write it as a count per time, e.g. 200/s, 1000/m or 10/100ms", v)
	}
	d, err := time.ParseDuration(per)
	if err != nil {
		d, err = time.ParseDuration("1" + per)
	}
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("rate %q: the time after '/' must be a unit or a duration: s, m, h, 100ms", v)
	}
	return n / d.Seconds(), nil
}

// limitOption applies one rate=, burst=, max_in_flight= or min_time_left=
// value to l; 0 (or "unlimited") lifts that limit.
func (l *Limits) limitOption(key, value string) error {
	unlimited := value == "0" || value == "unlimited"
	switch key {
	case "rate":
		if unlimited {
			l.Rate, l.Burst = 0, 0
			return nil
		}
		r, err := ParseRate(value)
		if err != nil {
			return err
		}
		l.Rate = r
	case "min_time_left":
		if unlimited {
			l.MinTimeLeft = 0
			return nil
		}
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 {
			return fmt.Errorf("min_time_left=%s is not a positive duration; write it like 2s or 500ms", value)
		}
		l.MinTimeLeft = d
	case "burst", "max_in_flight":
		n := 0
		if !unlimited {
			var err error
			if n, err = strconv.Atoi(value); err != nil || n <= 0 {
				return fmt.Errorf("%s=%s is not a positive whole number", key, value)
			}
		}
		if key == "burst" {
			l.Burst = n
		} else {
			l.MaxInFlight = n
		}
	default:
		return fmt.Errorf("unknown limit %q: use rate=, burst=, max_in_flight= or min_time_left=", key)
	}
	return nil
}

// LimitOptions are the sink URL options that set the limits of every
// route; [CutLimits] takes them out of the URL.
var LimitOptions = []string{"rate", "burst", "max_in_flight", "min_time_left"}

// CutLimits takes the options rate=, burst=, max_in_flight= and
// min_time_left= out of a
// sink URL's query and returns the URL without them (the rest of the
// query kept as written) and the limits they set, which apply to each
// route separately. Errors quote the URL as [RedactURL] does.
func CutLimits(raw string) (string, Limits, error) {
	var l Limits
	base, rest, hasQuery := strings.Cut(raw, "?")
	if !hasQuery {
		return raw, l, nil
	}
	query, fragment, hasFragment := strings.Cut(rest, "#")
	var kept []string
	seen := map[string]bool{}
	for part := range strings.SplitSeq(query, "&") {
		k, v, _ := strings.Cut(part, "=")
		key, err1 := url.QueryUnescape(k)
		value, err2 := url.QueryUnescape(v)
		if err1 != nil || !isLimitOption(key) {
			kept = append(kept, part)
			continue
		}
		if err2 != nil {
			return "", Limits{}, fmt.Errorf("sink URL %q: option %s has a value that is not valid URL escaping: write %%25 for a literal %%", RedactURL(raw), key)
		}
		if seen[key] {
			return "", Limits{}, fmt.Errorf("sink URL %q: option %s is given twice: keep one", RedactURL(raw), key)
		}
		seen[key] = true
		if err := l.limitOption(key, value); err != nil {
			return "", Limits{}, fmt.Errorf("sink URL %q: %w", RedactURL(raw), err)
		}
	}
	if err := l.Validate(); err != nil {
		return "", Limits{}, fmt.Errorf("sink URL %q: %w", RedactURL(raw), err)
	}
	out := base
	if q := strings.Join(kept, "&"); q != "" {
		out += "?" + q
	}
	if hasFragment {
		out += "#" + fragment
	}
	return out, l, nil
}

func isLimitOption(k string) bool {
	for _, o := range LimitOptions {
		if k == o {
			return true
		}
	}
	return false
}

// ParseRouteLimit reads one per-route override, as given to the CLI's
// --route-limit: ROUTE=rate=100/s,burst=20,max_in_flight=8. ROUTE is a
// route as the sink's Destination names it (a topic, a subject,
// exchange/routing-key, a URL); it is everything before the first '='.
// The limits given replace those of base (the URL's) for that route, the
// others are kept; 0 lifts one.
func ParseRouteLimit(spec string, base Limits) (route string, l Limits, err error) {
	route, opts, ok := strings.Cut(spec, "=")
	if !ok || route == "" || opts == "" {
		return "", Limits{}, fmt.Errorf("route limit %q: use ROUTE=rate=100/s,burst=20,max_in_flight=8", spec)
	}
	l = base
	for opt := range strings.SplitSeq(opts, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(opt), "=")
		if !ok || v == "" {
			return "", Limits{}, fmt.Errorf("route limit %q: %q is not name=value (rate=, burst=, max_in_flight=, min_time_left=)", spec, opt)
		}
		if err := l.limitOption(k, v); err != nil {
			return "", Limits{}, fmt.Errorf("route limit %q: %w", spec, err)
		}
	}
	if err := l.Validate(); err != nil {
		return "", Limits{}, fmt.Errorf("route limit %q: %w", spec, err)
	}
	return route, l, nil
}
