package sink

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/txoutbox/outbox"
)

// DefaultRoute is the destination template used when none is configured:
// payment events go to "payment.events", merchant events to
// "merchant.events", the Kafka topics of the payment story
// (docs/ARCHITECTURE.md).
const DefaultRoute = "{aggregate_type}.events"

// Router maps a message to its destination (Kafka topic, NATS subject,
// AMQP routing key, Redis stream). A template may use {aggregate_type},
// {aggregate_id} and {event_type}; a per-aggregate-type override replaces
// the template for that type.
type Router struct {
	main      compiled
	overrides map[string]compiled
	source    string            // the template as given (or DefaultRoute)
	sources   map[string]string // the overrides as given
}

// compiled is a template split into literal text and placeholders, so that
// routing a message is a few appends.
type compiled []part

type part struct {
	lit   string
	field int // 0: literal; 1 aggregate_type, 2 aggregate_id, 3 event_type
}

func compile(t string) compiled {
	var out compiled
	for t != "" {
		i := strings.IndexByte(t, '{')
		if i < 0 {
			out = append(out, part{lit: t})
			break
		}
		if i > 0 {
			out = append(out, part{lit: t[:i]})
		}
		p := placeholderAt(t[i:])
		if p == "" { // checkTemplate refuses such a template; never loop on it
			out = append(out, part{lit: t[i:]})
			break
		}
		out = append(out, part{field: slices.Index(placeholders, p) + 1})
		t = t[i+len(p):]
	}
	return out
}

var placeholders = []string{"{aggregate_type}", "{aggregate_id}", "{event_type}"}

// NewRouter validates the template (empty means DefaultRoute) and the
// overrides (aggregate type -> template).
func NewRouter(template string, overrides map[string]string) (*Router, error) {
	return newRouter(func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{outbox.ErrInvalidConfig}, args...)...)
	}, template, overrides)
}

// NewRouterFor is NewRouter for the sink named sinkName: its errors say
// the sink, as [Invalid] does ("...: kafka sink: route template ...").
func NewRouterFor(sinkName, template string, overrides map[string]string) (*Router, error) {
	return newRouter(func(format string, args ...any) error {
		return Invalid(sinkName, format, args...)
	}, template, overrides)
}

func newRouter(invalid func(format string, args ...any) error, template string, overrides map[string]string) (*Router, error) {
	if template == "" {
		template = DefaultRoute
	}
	if err := checkTemplate(invalid, template); err != nil {
		return nil, err
	}
	r := &Router{main: compile(template), overrides: make(map[string]compiled, len(overrides)),
		source: template, sources: make(map[string]string, len(overrides))}
	for k, v := range overrides {
		if k == "" {
			return nil, invalid("route override with an empty aggregate type")
		}
		if err := checkTemplate(invalid, v); err != nil {
			return nil, err
		}
		r.overrides[k] = compile(v)
		r.sources[k] = v
	}
	return r, nil
}

// ProbeMessage is the message CheckRoutes routes through a template:
// aggregateType (an override's own type, or "payment"), aggregate id "x",
// event type "E". What a route gives other messages depends on their data;
// a destination the broker refuses then fails that event alone, with a
// [DestinationError].
func ProbeMessage(aggregateType string) *outbox.Message {
	return &outbox.Message{AggregateType: aggregateType, AggregateID: "x", EventType: "E"}
}

// CheckRoutes routes a message with plain field values (aggregate type
// "payment", or an override's own type; aggregate id "x"; event type "E")
// through the template and through every override, and returns a
// configuration error of the sink named sinkName for the first destination
// that check refuses. A template whose own text makes every destination
// invalid ("payment events" as a NATS subject, "{aggregate_type} events" as
// a Kafka topic) is thus refused when the sink starts, not on every event.
func (r *Router) CheckRoutes(sinkName string, check func(dest string) error) error {
	try := func(template, aggType string) error {
		dest := r.Route(ProbeMessage(aggType))
		if err := check(dest); err != nil {
			return Invalid(sinkName, "route template %q gives destinations such as %q, which the broker refuses: %v", template, dest, err)
		}
		return nil
	}
	if err := try(r.source, "payment"); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(r.sources)) {
		if err := try(r.sources[k], k); err != nil {
			return err
		}
	}
	return nil
}

// checkTemplate reads t from left to right as compile does: every '{'
// must open one of the placeholders, and no '}' may stand outside one.
// (Removing the placeholders and looking for braces is not enough:
// "{event_{aggregate_type}type}" has none left once "{aggregate_type}" and
// then "{event_type}" are removed.)
func checkTemplate(invalid func(format string, args ...any) error, t string) error {
	if strings.TrimSpace(t) == "" {
		return invalid("empty route template")
	}
	for rest := t; rest != ""; {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			break
		}
		p := placeholderAt(rest[i:])
		if p == "" {
			return invalid("route template %q has an unknown placeholder or a stray brace at %q: use %s",
				t, rest[i:min(len(rest), i+20)], strings.Join(placeholders, ", "))
		}
		rest = rest[i+len(p):]
	}
	return nil
}

// placeholderAt returns the placeholder s starts with, or "".
func placeholderAt(s string) string {
	for _, p := range placeholders {
		if strings.HasPrefix(s, p) {
			return p
		}
	}
	return ""
}

// template returns the compiled template that routes m.
func (r *Router) template(m *outbox.Message) compiled {
	if o, ok := r.overrides[m.AggregateType]; ok {
		return o
	}
	return r.main
}

// Route returns the destination of m. It is a few appends, cheap enough
// to call for every message (the relay names routes with it through
// [Destinations]).
func (r *Router) Route(m *outbox.Message) string {
	t := r.template(m)
	if len(t) == 1 && t[0].field == 0 {
		return t[0].lit
	}
	var b strings.Builder
	for _, p := range t {
		switch p.field {
		case 0:
			b.WriteString(p.lit)
		case 1:
			b.WriteString(m.AggregateType)
		case 2:
			b.WriteString(m.AggregateID)
		case 3:
			b.WriteString(m.EventType)
		}
	}
	return b.String()
}

// ParseRouteOverrides parses "type=template" pairs, as given to --route.
func ParseRouteOverrides(pairs []string) (map[string]string, error) {
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%w: route %q: use aggregate_type=destination, e.g. merchant=merchant.audit", outbox.ErrInvalidConfig, p)
		}
		out[k] = v
	}
	return out, nil
}

// Literals returns the destinations of the templates that use no
// placeholder (the main template and the overrides), which a sink can
// check once, at construction, rather than per message.
func (r *Router) Literals() []string {
	var out []string
	for _, t := range append([]compiled{r.main}, slices.Collect(maps.Values(r.overrides))...) {
		if len(t) == 1 && t[0].field == 0 {
			out = append(out, t[0].lit)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
