// Package destconfig reads the destinations file of `outbox relay
// --config FILE`: the named destinations events are delivered to (each a
// sink URL, as --sink takes) and the routes that say which events go to
// which destinations, first matching route first. See
// docs/DESTINATIONS.md for the format.
//
// The file is read strictly: an unknown key, a route to a destination
// that is not defined, a bad destination URL and the like are refused
// with every problem at once, each naming the file and line to fix.
// Destination URLs are checked by the parsers of the sinks themselves,
// without connecting to anything. Secrets in URLs (passwords, secret
// query options) are masked in every error and in the plan.
package destconfig

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/redact"
)

// Config is a destinations file that was read and found valid.
type Config struct {
	// File is the file's name as given to [Load] or [Parse].
	File string
	// Destinations are the destinations in the order of the file.
	Destinations []Destination
	// Routes are the routes in the order of the file: the first that
	// matches an event decides where it goes.
	Routes []Route
	// RoutesLine is the line of routes:.
	RoutesLine int
	// Warnings are what the file does that is allowed but probably not
	// meant: a destination no route uses.
	Warnings []Problem
}

// Destination is one named destination.
type Destination struct {
	Name string
	// URL is the sink URL as written. It may hold secrets (a password,
	// a token option): show it with [Destination.RedactedURL].
	URL string
	// Line is where the destination is defined.
	Line int
	// Table is the destination table named by table:, or "" for the
	// default (see [Config.Tables]); TableLine is the line of table:.
	Table     string
	TableLine int
}

// RedactedURL is the destination's URL with its password and secret
// options masked, for display.
func (d Destination) RedactedURL() string { return redact.URL(d.URL) }

// Route sends the events it matches to its destinations.
type Route struct {
	// EventType and AggregateType are the route's conditions; a route
	// matches an event when both do. A Pattern left out matches anything.
	EventType     Pattern
	AggregateType Pattern
	// To names the destinations, in the order of the file.
	To []string
	// Line is where the route begins (its "- " item).
	Line int
}

// CatchAll reports whether the route matches every event (match: {}).
func (r Route) CatchAll() bool { return r.EventType.Any() && r.AggregateType.Any() }

// Matches reports whether the route takes an event of these types.
func (r Route) Matches(eventType, aggregateType string) bool {
	return r.EventType.Match(eventType) && r.AggregateType.Match(aggregateType)
}

// Load reads and checks the destinations file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: destinations file: %v", outbox.ErrInvalidConfig, err)
	}
	return Parse(path, data)
}

// Resolve returns the destinations of an event of these types: those of
// the first route that matches it. ok is false when no route matches. The
// returned slice is the route's own: do not modify it.
func (c *Config) Resolve(eventType, aggregateType string) (destinations []string, ok bool) {
	if i := c.routeOf(eventType, aggregateType); i >= 0 {
		return c.Routes[i].To, true
	}
	return nil, false
}

// routeOf returns the index of the first route matching the types, or -1.
func (c *Config) routeOf(eventType, aggregateType string) int {
	for i, r := range c.Routes {
		if r.Matches(eventType, aggregateType) {
			return i
		}
	}
	return -1
}

// Problem is one thing to fix in a destinations file.
type Problem struct {
	File string
	// Line is the line to fix (1 is the first); 0 when the YAML parser
	// did not say.
	Line    int
	Message string
}

func (p Problem) String() string {
	if p.Line <= 0 {
		return p.File + ": " + p.Message
	}
	return p.File + ":" + strconv.Itoa(p.Line) + ": " + p.Message
}

// Error is a destinations file refused: every problem found in it, in
// the order of the file. It matches [outbox.ErrInvalidConfig].
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return outbox.ErrInvalidConfig.Error() + ": destinations file " + e.Problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: destinations file %s has %d problems to fix:", outbox.ErrInvalidConfig, e.File, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return outbox.ErrInvalidConfig }
