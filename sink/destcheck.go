package sink

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/txoutbox/outbox"
)

// DestinationError is the result of a message whose route gives a
// destination the sink refuses to use: a NATS subject with a wildcard or
// a system prefix, a Kafka topic with an illegal character, an AMQP
// routing key over 255 bytes. Routing is computed from event data, and
// event data must never change a broker's configuration (add a subject
// to a stream, create a topic), so the sink checks every destination
// before it sends and fails the event for good. The sinks return it
// wrapped in [outbox.Permanent].
type DestinationError struct {
	Sink    string         // e.g. "nats sink"
	EventID outbox.EventID // the event refused
	Kind    string         // what the destination is: "subject", "topic", "routing key", "stream key"
	Value   string         // the destination routing computed (cut to 200 bytes)
	Fields  string         // the event fields the route used, e.g. `aggregate_type "merchant.>"`
	Reason  string         // what is wrong with it
}

func (e *DestinationError) Error() string {
	msg := e.Sink + ": event " + e.EventID.String() + ": the route gives the invalid " + e.Kind + " " + strconv.Quote(e.Value)
	if e.Fields != "" {
		msg += " (from " + e.Fields + ")"
	}
	return msg + ": " + e.Reason + "; fix the event's fields, or route its aggregate type elsewhere (--route TYPE=DEST), then requeue it"
}

// maxQuoted bounds a destination quoted in an error.
const maxQuoted = 200

// Invalid returns the permanent error of m, whose route gave dest, a
// destination of the given kind ("subject", "topic") that the sink
// named sinkName refuses for reason. The error names the event fields
// the route took from m.
func (r *Router) Invalid(sinkName, kind string, m *outbox.Message, dest, reason string) error {
	return outbox.Permanent(&DestinationError{
		Sink:    sinkName,
		EventID: m.EventID,
		Kind:    kind,
		Value:   cut(dest, maxQuoted),
		Fields:  r.fields(m),
		Reason:  reason,
	})
}

// fields names the values of m that its route template uses.
func (r *Router) fields(m *outbox.Message) string {
	var names []string
	seen := [4]bool{}
	for _, p := range r.template(m) {
		if p.field == 0 || seen[p.field] {
			continue
		}
		seen[p.field] = true
		v := [...]string{"", m.AggregateType, m.AggregateID, m.EventType}[p.field]
		names = append(names, strings.Trim(placeholders[p.field-1], "{}")+" "+strconv.Quote(cut(v, maxQuoted)))
	}
	return strings.Join(names, ", ")
}

// cut shortens s to at most n bytes, at a character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
