package destconfig

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/txoutbox/outbox"
)

// TypePair is the (event_type, aggregate_type) of events in a table.
type TypePair struct {
	EventType     string
	AggregateType string
}

func (t TypePair) String() string {
	return "event_type " + quote(t.EventType) + ", aggregate_type " + quote(t.AggregateType)
}

// UnmatchedError names the type pairs of a table that no route matches.
// It matches [outbox.ErrInvalidConfig].
type UnmatchedError struct {
	File string
	// RoutesLine is the line of the file's routes:, where a route for
	// them goes.
	RoutesLine int
	Pairs      []TypePair
}

func (e *UnmatchedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: destinations file %s:%d: no route matches %d type pair(s) of events already in the table:",
		outbox.ErrInvalidConfig, e.File, e.RoutesLine, len(e.Pairs))
	for _, p := range e.Pairs {
		b.WriteString("\n  " + p.String())
	}
	fmt.Fprintf(&b, "\nadd a route for them under routes: (line %d), or a last route with match: {} for every other event", e.RoutesLine)
	return b.String()
}

func (e *UnmatchedError) Unwrap() error { return outbox.ErrInvalidConfig }

// CheckTypes returns an [*UnmatchedError] naming every pair of types no
// route matches, in the order given, or nil when every pair has a route.
func (c *Config) CheckTypes(types []TypePair) error {
	var unmatched []TypePair
	for _, t := range types {
		if c.routeOf(t.EventType, t.AggregateType) < 0 {
			unmatched = append(unmatched, t)
		}
	}
	if len(unmatched) == 0 {
		return nil
	}
	return &UnmatchedError{File: c.File, RoutesLine: c.RoutesLine, Pairs: unmatched}
}

// Describe returns the plan of the file, as `outbox relay --config FILE
// --check` prints it: each destination (its URL with secrets masked) and
// the routes that use it, each route in order, the destinations of each
// pair of types given (those of the table), and the warnings. No secret
// of a URL appears in it.
func (c *Config) Describe(types []TypePair) string {
	var b strings.Builder
	fmt.Fprintf(&b, "destinations (%s):\n", c.File)
	width := 0
	for _, d := range c.Destinations {
		width = max(width, len(d.Name))
	}
	for _, d := range c.Destinations {
		var routes []string
		for i, r := range c.Routes {
			for _, to := range r.To {
				if to == d.Name {
					routes = append(routes, strconv.Itoa(i+1))
				}
			}
		}
		used := "used by no route"
		if len(routes) > 0 {
			used = "route " + strings.Join(routes, ", ")
		}
		fmt.Fprintf(&b, "  %-*s  %s  (line %d; %s)\n", width, d.Name, d.RedactedURL(), d.Line, used)
	}
	b.WriteString("routes (the first that matches an event decides):\n")
	for i, r := range c.Routes {
		fmt.Fprintf(&b, "  %d. %s -> %s  (line %d)\n", i+1, describeMatch(r), strings.Join(r.To, ", "), r.Line)
	}
	if types != nil {
		b.WriteString("event types in the table:\n")
		if len(types) == 0 {
			b.WriteString("  (none)\n")
		}
		for _, t := range types {
			i := c.routeOf(t.EventType, t.AggregateType)
			if i < 0 {
				fmt.Fprintf(&b, "  %s -> NO ROUTE: add a route for it, or a last route with match: {}\n", t)
				continue
			}
			fmt.Fprintf(&b, "  %s -> %s  (route %d)\n", t, strings.Join(c.Routes[i].To, ", "), i+1)
		}
	}
	if len(c.Warnings) > 0 {
		b.WriteString("warnings:\n")
		for _, w := range c.Warnings {
			b.WriteString("  " + w.String() + "\n")
		}
	}
	return b.String()
}

// describeMatch writes a route's conditions.
func describeMatch(r Route) string {
	switch {
	case r.CatchAll():
		return "every event"
	case r.AggregateType.Any():
		return "event_type " + r.EventType.String()
	case r.EventType.Any():
		return "aggregate_type " + r.AggregateType.String()
	}
	return "event_type " + r.EventType.String() + " and aggregate_type " + r.AggregateType.String()
}
