package sinkkit

import (
	"encoding/json"
	"fmt"
	"github.com/txoutbox/outbox/sink"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
)

// Format is how a sink encodes an event on the wire.
type Format string

// The formats. Native is every sink's default; the others are options of
// the sinks that list them (format= in the URL).
const (
	// FormatNative: the payload as the body, the outbox-* headers.
	FormatNative Format = "native"
	// FormatCloudEvents: a CloudEvents 1.0 event in binary content mode:
	// the payload as the body, the attributes as headers (ce-id, ce_id,
	// cloudEvents:id, as the protocol's binding says).
	FormatCloudEvents Format = "cloudevents"
	// FormatCloudEventsStructured: a CloudEvents 1.0 event in structured
	// content mode: the JSON event format, the payload as its "data".
	FormatCloudEventsStructured Format = "cloudevents-structured"
	// FormatDebezium: the record Debezium's outbox event router makes
	// (Kafka only): key aggregate_id, header id, the payload as the value.
	FormatDebezium Format = "debezium"
)

// ParseFormat reads a format= option: empty means native; any other value
// must be one of allowed (native is always allowed).
func ParseFormat(sinkName, value string, allowed ...Format) (Format, error) {
	if value == "" || Format(value) == FormatNative {
		return FormatNative, nil
	}
	if slices.Contains(allowed, Format(value)) {
		return Format(value), nil
	}
	names := []string{string(FormatNative)}
	for _, f := range allowed {
		names = append(names, string(f))
	}
	return "", sink.Invalid(sinkName, "format %q is not supported: use %s", value, strings.Join(names, ", "))
}

// IsCloudEvents reports whether f is one of the CloudEvents formats.
func (f Format) IsCloudEvents() bool {
	return f == FormatCloudEvents || f == FormatCloudEventsStructured
}

// CloudEvents constants.
const (
	// CloudEventsJSON is the media type of a structured CloudEvent.
	CloudEventsJSON = "application/cloudevents+json"
	// CloudEventsSpecVersion is the version of the specification the
	// sinks follow.
	CloudEventsSpecVersion = "1.0"
)

// DefaultCloudEventsSource is the source of the events of an outbox table
// when the sink URL names none (source=): "/outbox/<table>", with the
// default table outbox_events when table is empty.
func DefaultCloudEventsSource(table string) string {
	if table == "" {
		table = "outbox_events"
	}
	return "/outbox/" + table
}

// CheckCloudEventsSource validates a source= value: a non-empty URI
// reference.
func CheckCloudEventsSource(sinkName, source string) error {
	if source == "" {
		return nil
	}
	if _, err := url.Parse(source); err != nil || strings.ContainsAny(source, " \t\r\n") {
		return sink.Invalid(sinkName, "source %q is not a URI reference: use a path such as /outbox/payments or a URI such as urn:payments", source)
	}
	return nil
}

// Attr is one CloudEvents context attribute, by its name in the
// specification ("id", "source", ...).
type Attr struct{ Name, Value string }

// CloudEventAttributes returns the context attributes of m, from source
// (empty: the default table's), in a fixed order, without
// datacontenttype (always application/json, carried by the binding as
// the content type):
//
//	specversion    1.0
//	id             the event id
//	source         source
//	type           the event type
//	subject        the aggregate id
//	time           created_at, RFC 3339
//	aggregatetype  the aggregate type (extension)
//	sequence       the outbox-aggregate-seq header, when the event has one
//	traceparent    the event's traceparent header, when present
//	tracestate     the event's tracestate header, when present
func CloudEventAttributes(m *outbox.Message, source string) []Attr {
	if source == "" {
		source = DefaultCloudEventsSource("")
	}
	attrs := make([]Attr, 0, 10)
	attrs = append(attrs,
		Attr{"specversion", CloudEventsSpecVersion},
		Attr{"id", m.EventID.String()},
		Attr{"source", source},
		Attr{"type", m.EventType},
		Attr{"subject", m.AggregateID},
	)
	if !m.CreatedAt.IsZero() {
		attrs = append(attrs, Attr{"time", m.CreatedAt.UTC().Format(time.RFC3339Nano)})
	}
	attrs = append(attrs, Attr{"aggregatetype", m.AggregateType})
	for _, h := range [...][2]string{{sink.HeaderAggregateSeq, "sequence"}, {sink.HeaderTraceparent, "traceparent"}, {sink.HeaderTracestate, "tracestate"}} {
		if v, ok := m.Headers[h[0]]; ok && v != "" {
			attrs = append(attrs, Attr{h[1], v})
		}
	}
	return attrs
}

// CloudEventJSON returns m as a structured CloudEvent in the JSON event
// format: the attributes of [CloudEventAttributes], datacontenttype
// application/json, and the payload as "data" (a JSON value, not a
// string). A payload that is not valid JSON is an error.
func CloudEventJSON(m *outbox.Message, source string) ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for _, a := range CloudEventAttributes(m, source) {
		k, _ := json.Marshal(a.Name)
		v, _ := json.Marshal(a.Value)
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
		b.WriteByte(',')
	}
	b.WriteString(`"datacontenttype":"application/json","data":`)
	data := []byte(m.Payload)
	if len(data) == 0 {
		data = []byte("null")
	} else if !json.Valid(data) {
		return nil, fmt.Errorf("event %s: the payload is not valid JSON, so it cannot be the data of a structured CloudEvent", m.EventID)
	}
	b.Write(data)
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// CheckFormat validates a sink's Format (one of allowed, or native) and
// its CloudEvents Source.
func CheckFormat(sinkName string, f Format, source string, allowed ...Format) error {
	if _, err := ParseFormat(sinkName, string(f), allowed...); err != nil {
		return err
	}
	return CheckCloudEventsSource(sinkName, source)
}
