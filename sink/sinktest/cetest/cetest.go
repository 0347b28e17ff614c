// Package cetest decodes what the sinks send in the CloudEvents formats
// with the official CloudEvents Go SDK (github.com/cloudevents/sdk-go/v2),
// for the sinks' tests, and checks the attributes against the event.
// Production code never imports it: the sinks implement the mapping
// themselves, from the specification's protocol bindings.
//
// HTTP requests are decoded by the SDK's own HTTP binding. For Kafka,
// NATS and AMQP the SDK's protocol modules pull in other clients (sarama,
// go-amqp), so [Decode] hands the headers to the SDK's binding reader
// (binding.ToEvent) under the prefix of each binding: ce_ for Kafka, ce-
// for NATS, cloudEvents: for AMQP; the SDK then parses the attributes,
// validates the event and reads the data.
package cetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

// Header prefixes of the protocol bindings.
const (
	PrefixKafka = "ce_"
	PrefixNATS  = "ce-"
	PrefixAMQP  = "cloudEvents:"
)

// DecodeHTTP decodes a request with the SDK's HTTP binding.
func DecodeHTTP(header http.Header, body []byte) (*event.Event, error) {
	return binding.ToEvent(context.Background(), cehttp.NewMessage(header, io.NopCloser(bytes.NewReader(body))))
}

// Decode decodes a message of a binding whose headers are headers (the
// attributes under prefix, the content type under contentTypeKey) and
// whose body is body.
func Decode(headers map[string]string, prefix, contentTypeKey string, body []byte) (*event.Event, error) {
	return binding.ToEvent(context.Background(), &message{headers: headers, prefix: prefix, ctKey: contentTypeKey, body: body})
}

type message struct {
	headers       map[string]string
	prefix, ctKey string
	body          []byte
}

func (m *message) versions() *spec.Versions { return spec.WithPrefix(m.prefix) }

func (m *message) ReadEncoding() binding.Encoding {
	if format.Lookup(m.headers[m.ctKey]) != nil {
		return binding.EncodingStructured
	}
	if _, ok := m.headers[m.prefix+"specversion"]; ok {
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

func (m *message) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	f := format.Lookup(m.headers[m.ctKey])
	if f == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, f, bytes.NewReader(m.body))
}

func (m *message) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	v := m.versions().Version(m.headers[m.prefix+"specversion"])
	if v == nil {
		return binding.ErrNotBinary
	}
	if ct, ok := m.headers[m.ctKey]; ok {
		if err := w.SetAttribute(v.AttributeFromKind(spec.DataContentType), ct); err != nil {
			return err
		}
	}
	for k, val := range m.headers {
		if !strings.HasPrefix(k, m.prefix) {
			continue
		}
		if attr := v.Attribute(k); attr != nil {
			if err := w.SetAttribute(attr, val); err != nil {
				return err
			}
			continue
		}
		if err := w.SetExtension(strings.ToLower(strings.TrimPrefix(k, m.prefix)), val); err != nil {
			return err
		}
	}
	return w.SetData(bytes.NewReader(m.body))
}

func (m *message) Finish(error) error { return nil }

// GetAttribute and GetExtension make the message a
// binding.MessageMetadataReader, as the SDK's binding readers are.
func (m *message) GetAttribute(k spec.Kind) (spec.Attribute, interface{}) {
	v := m.versions().Version(m.headers[m.prefix+"specversion"])
	if v == nil {
		return nil, nil
	}
	attr := v.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if k == spec.DataContentType {
		if ct, ok := m.headers[m.ctKey]; ok {
			return attr, ct
		}
		return attr, nil
	}
	if val, ok := m.headers[attr.PrefixedName()]; ok {
		return attr, val
	}
	return attr, nil
}

func (m *message) GetExtension(name string) interface{} {
	if val, ok := m.headers[m.prefix+name]; ok {
		return val
	}
	return nil
}

// Check compares a decoded event with the message it was made from:
// id, source, type, subject, time, datacontenttype, data and the
// extensions aggregatetype, sequence and traceparent.
func Check(e *event.Event, m *outbox.Message, source string) error {
	if err := e.Validate(); err != nil {
		return fmt.Errorf("the SDK finds the event invalid: %w", err)
	}
	var problems []string
	want := func(what, got, exp string) {
		if got != exp {
			problems = append(problems, fmt.Sprintf("%s = %q, want %q", what, got, exp))
		}
	}
	want("specversion", e.SpecVersion(), "1.0")
	want("id", e.ID(), m.EventID.String())
	want("source", e.Source(), source)
	want("type", e.Type(), m.EventType)
	want("subject", e.Subject(), m.AggregateID)
	want("datacontenttype", e.DataContentType(), "application/json")
	if !e.Time().Equal(m.CreatedAt) {
		problems = append(problems, fmt.Sprintf("time = %s, want %s", e.Time().Format(time.RFC3339Nano), m.CreatedAt.Format(time.RFC3339Nano)))
	}
	ext := e.Extensions()
	str := func(name string) string { s, _ := ext[name].(string); return s }
	want("aggregatetype", str("aggregatetype"), m.AggregateType)
	want("sequence", str("sequence"), m.Headers[sink.HeaderAggregateSeq])
	want("traceparent", str("traceparent"), m.Headers[sink.HeaderTraceparent])
	var got, exp any
	if err := json.Unmarshal(e.Data(), &got); err != nil {
		problems = append(problems, fmt.Sprintf("data %q is not JSON: %v", e.Data(), err))
	} else if _ = json.Unmarshal(m.Payload, &exp); fmt.Sprint(got) != fmt.Sprint(exp) {
		problems = append(problems, fmt.Sprintf("data = %s, want %s", e.Data(), m.Payload))
	}
	if len(problems) > 0 {
		return fmt.Errorf("decoded event: %s", strings.Join(problems, "; "))
	}
	return nil
}

// Message returns a message with every field the mapping uses: a
// sequence header, a traceparent and a tracestate.
func Message(key string) outbox.Message {
	m := outbox.Message{
		ID:            1,
		EventID:       outbox.NewEventID(),
		AggregateType: "payment",
		AggregateID:   key,
		EventType:     "ApprovalRequested",
		Payload:       json.RawMessage(`{"transaction_no":"` + key + `","amount":15000}`),
		Headers: map[string]string{
			sink.HeaderAggregateSeq: "7",
			sink.HeaderTraceparent:  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			sink.HeaderTracestate:   "vendor=opaque",
		},
		Attempt:   1,
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond),
	}
	return m
}
