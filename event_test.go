package outbox_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

func valid() outbox.Event {
	return outbox.Event{AggregateType: "payment", AggregateID: "tx-1", EventType: "ApprovalRequested", Payload: json.RawMessage(`{"amount":1000}`)}
}

func TestValidate(t *testing.T) {
	long := strings.Repeat("é", 101)
	cases := []struct {
		name  string
		edit  func(*outbox.Event)
		field string
	}{
		{"missing aggregate type", func(e *outbox.Event) { e.AggregateType = "" }, "aggregate_type"},
		{"missing aggregate id", func(e *outbox.Event) { e.AggregateID = "" }, "aggregate_id"},
		{"missing event type", func(e *outbox.Event) { e.EventType = "" }, "event_type"},
		{"aggregate id too long", func(e *outbox.Event) { e.AggregateID = long }, "aggregate_id"},
		{"invalid UTF-8", func(e *outbox.Event) { e.AggregateID = "\xff" }, "aggregate_id"},
		{"control character", func(e *outbox.Event) { e.EventType = "a\nb" }, "event_type"},
		{"missing payload", func(e *outbox.Event) { e.Payload = nil }, "payload"},
		{"invalid JSON", func(e *outbox.Event) { e.Payload = json.RawMessage(`{"a":}`) }, "payload"},
		{"trailing garbage", func(e *outbox.Event) { e.Payload = json.RawMessage(`{} x`) }, "payload"},
		{"NUL escape", func(e *outbox.Event) { e.Payload = json.RawMessage(`{"a":"\u0000"}`) }, "payload"},
		{"payload not UTF-8", func(e *outbox.Event) { e.Payload = json.RawMessage("{\"a\":\"\xff\"}") }, "payload"},
		{"payload key not UTF-8", func(e *outbox.Event) { e.Payload = json.RawMessage("{\"\xc3\":1}") }, "payload"},
		{"payload lone high surrogate", func(e *outbox.Event) { e.Payload = json.RawMessage(`{"a":"\ud800"}`) }, "payload"},
		{"payload lone low surrogate", func(e *outbox.Event) { e.Payload = json.RawMessage(`["\uDC00x"]`) }, "payload"},
		{"aggregate type not UTF-8", func(e *outbox.Event) { e.AggregateType = "pay\xe9" }, "aggregate_type"},
		{"event type not UTF-8", func(e *outbox.Event) { e.EventType = "\xed\xa0\x80" }, "event_type"},
		{"header key not UTF-8", func(e *outbox.Event) { e.Headers = map[string]string{"x-\xff": "v"} }, "headers"},
		{"header value not UTF-8", func(e *outbox.Event) { e.Headers = map[string]string{"x-trace": "a\xffb"} }, "headers"},
		{"bad header name", func(e *outbox.Event) { e.Headers = map[string]string{"bad name": "x"} }, "headers"},
		{"header injection", func(e *outbox.Event) { e.Headers = map[string]string{"X": "a\r\nb"} }, "headers"},
		{"negative ttl", func(e *outbox.Event) { e.TTL = -time.Second }, "ttl"},
		{"ttl and expires_at", func(e *outbox.Event) { e.TTL = time.Second; e.ExpiresAt = time.Now() }, "ttl"},
		{"delay and available_at", func(e *outbox.Event) { e.Delay = time.Second; e.AvailableAt = time.Now() }, "delay"},
	}
	for _, tc := range cases {
		e := valid()
		tc.edit(&e)
		err := e.Validate(outbox.Limits{})
		var ie *outbox.InvalidEventError
		if !errors.Is(err, outbox.ErrInvalidEvent) || !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%s: Validate = %v, want an InvalidEventError on %s", tc.name, err, tc.field)
		}
	}
	e := valid()
	if err := e.Validate(outbox.Limits{}); err != nil {
		t.Fatalf("valid event: %v", err)
	}
	// Text that only looks like a bad escape, and escapes that are fine.
	for _, p := range []string{`{"a":"\\u0000"}`, `{"a":"\\ud800"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ufffd é 日本"}`, `"\\\"\\u0000"`} {
		e.Payload = json.RawMessage(p)
		if err := e.Validate(outbox.Limits{}); err != nil {
			t.Errorf("payload %s: %v", p, err)
		}
	}
}

// Invalid UTF-8 and lone surrogates are refused with a reason that says
// what is wrong, and Prepare writes nothing: it returns no events.
func TestPrepareRefusesInvalidText(t *testing.T) {
	bad := valid()
	bad.Payload = json.RawMessage("{\"note\":\"caf\xe9\"}")
	out, err := outbox.PrepareForTest(outbox.Limits{}, []outbox.Event{valid(), bad})
	var ie *outbox.InvalidEventError
	if !errors.As(err, &ie) || ie.Index != 1 || ie.Field != "payload" || !strings.Contains(ie.Reason, "UTF-8") || out != nil {
		t.Fatalf("Prepare = %v, %v; want event #1's payload refused as not UTF-8 and no events", out, err)
	}
	bad = valid()
	bad.Payload = json.RawMessage(`{"a":"\udbff"}`)
	if err := bad.Validate(outbox.Limits{}); err == nil || !strings.Contains(err.Error(), "surrogate") {
		t.Fatalf("lone surrogate: %v", err)
	}
}

func TestPayloadLimit(t *testing.T) {
	e := valid()
	e.Payload = json.RawMessage(`"` + strings.Repeat("a", 100) + `"`)
	if err := e.Validate(outbox.Limits{MaxPayloadBytes: 50}); err == nil || !strings.Contains(err.Error(), "limit is 50 bytes") {
		t.Fatalf("oversized payload: %v", err)
	}
	if err := e.Validate(outbox.Limits{MaxPayloadBytes: 200}); err != nil {
		t.Fatalf("payload under a raised limit: %v", err)
	}
	big := valid()
	big.Payload = json.RawMessage(`"` + strings.Repeat("a", outbox.DefaultMaxPayloadBytes) + `"`)
	if err := big.Validate(outbox.Limits{}); err == nil {
		t.Fatal("a payload over the default 1 MiB was accepted")
	}
	if err := (outbox.Limits{MaxPayloadBytes: -1}).Validate(); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("negative limit: %v", err)
	}
}

func TestPrepare(t *testing.T) {
	a, b := valid(), valid()
	fixed := outbox.NewEventID()
	b.ID = fixed
	out, err := outbox.PrepareForTest(outbox.Limits{}, []outbox.Event{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].ID.IsZero() || out[1].ID != fixed {
		t.Fatalf("ids = %s, %s", out[0].ID, out[1].ID)
	}
	bad := valid()
	bad.Payload = nil
	var ie *outbox.InvalidEventError
	if _, err := outbox.PrepareForTest(outbox.Limits{}, []outbox.Event{a, bad}); !errors.As(err, &ie) || ie.Index != 1 {
		t.Fatalf("Prepare with a bad second event: %v", err)
	}
	if _, err := outbox.PrepareForTest(outbox.Limits{}, []outbox.Event{b, b}); !errors.As(err, &ie) || ie.Field != "id" {
		t.Fatalf("Prepare with a repeated id: %v", err)
	}
}

func TestEventIDs(t *testing.T) {
	a, b := outbox.NewEventID(), outbox.NewEventID()
	if a == b || a.IsZero() {
		t.Fatal("NewEventID repeated or zero")
	}
	if a.String()[14] != '7' {
		t.Fatalf("%s is not a UUIDv7", a)
	}
	p, err := outbox.ParseEventID(a.String())
	if err != nil || p != a {
		t.Fatalf("ParseEventID round trip: %v", err)
	}
	if _, err := outbox.ParseEventID("not-a-uuid"); err == nil {
		t.Fatal("ParseEventID accepted garbage")
	}
	var s outbox.EventID
	if err := s.Scan(a.String()); err != nil || s != a {
		t.Fatalf("Scan: %v", err)
	}
}

func TestParseStatus(t *testing.T) {
	if s, err := outbox.ParseStatus("processed"); err != nil || s != outbox.StatusProcessed {
		t.Fatalf("ParseStatus(processed) = %s, %v", s, err)
	}
	if _, err := outbox.ParseStatus("LOST"); err == nil || !strings.Contains(err.Error(), "PENDING") {
		t.Fatalf("unknown status: %v", err)
	}
}

func TestPublishErrors(t *testing.T) {
	base := errors.New("HTTP 400")
	if !outbox.IsPermanent(outbox.Permanent(base)) || outbox.IsPermanent(outbox.Retryable(base, 0)) || outbox.IsPermanent(base) {
		t.Fatal("IsPermanent misclassifies")
	}
	if got := outbox.RetryAfter(outbox.Retryable(base, 3*time.Second)); got != 3*time.Second {
		t.Fatalf("RetryAfter = %s", got)
	}
	if !errors.Is(outbox.Permanent(base), base) {
		t.Fatal("PublishError does not unwrap")
	}
}
