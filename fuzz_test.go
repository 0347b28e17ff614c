package outbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/outbox"
)

// FuzzPrepare feeds arbitrary events to prepare, the validation every
// Enqueue runs. A refused event gets an *InvalidEventError that matches
// ErrInvalidEvent, names a known field and says why, and Prepare returns no
// events. An accepted event is stored and delivered as written: its text
// fields are UTF-8 without control characters, its payload is JSON that a
// decoder reads back without replacing anything (no U+FFFD appears that the
// producer did not write), its headers survive a JSON round trip, and Prepare
// gave it an id and changed nothing else.
func FuzzPrepare(f *testing.F) {
	f.Add("payment", "tx-1", "ApprovalRequested", []byte(`{"amount":15000}`), "traceparent", "00-abc-01", int64(66e9), int64(0))
	f.Add("payment", "tx-\xff", "E", []byte(`{}`), "", "", int64(0), int64(0))
	f.Add("p", "a", "E", []byte("{\"a\":\"\xed\xa0\x80\"}"), "k", "v", int64(0), int64(0))
	f.Add("p", "a", "E", []byte(`{"a":"\ud800"}`), "k", "v\x00", int64(-1), int64(0))
	f.Add("p", "a", "E", []byte(`["\\u0000", "\ud83d\ude00", "\u0000"]`), "x\xff", "v", int64(0), int64(5e9))
	f.Add("p", "a", "E", []byte(`"\\\"\\ud800"`), "k", "\xc3", int64(0), int64(-1))
	f.Fuzz(func(t *testing.T, aggType, aggID, eventType string, payload []byte, hk, hv string, ttl, delay int64) {
		ev := outbox.Event{
			AggregateType: aggType,
			AggregateID:   aggID,
			EventType:     eventType,
			Payload:       append(json.RawMessage(nil), payload...),
			TTL:           time.Duration(ttl),
			Delay:         time.Duration(delay),
		}
		if hk != "" {
			ev.Headers = map[string]string{hk: hv}
		}
		before := ev
		before.Payload = append(json.RawMessage(nil), payload...)
		out, err := outbox.PrepareForTest(outbox.Limits{MaxPayloadBytes: 4096}, []outbox.Event{ev})
		if err != nil {
			var ie *outbox.InvalidEventError
			if !errors.Is(err, outbox.ErrInvalidEvent) || !errors.As(err, &ie) {
				t.Fatalf("refusal %v does not match ErrInvalidEvent", err)
			}
			switch ie.Field {
			case "aggregate_type", "aggregate_id", "event_type", "payload", "headers", "ttl", "delay":
			default:
				t.Fatalf("refusal names the unknown field %q: %v", ie.Field, err)
			}
			if ie.Index != 0 || len(strings.TrimSpace(ie.Reason)) < 8 {
				t.Fatalf("refusal without a reason: %+v", ie)
			}
			if out != nil {
				t.Fatalf("Prepare refused the event yet returned %d events", len(out))
			}
			return
		}
		if len(out) != 1 || out[0].ID.IsZero() {
			t.Fatalf("Prepare returned %d events (id %v)", len(out), out)
		}
		got := out[0]
		got.ID = outbox.EventID{}
		if !reflect.DeepEqual(got, before) {
			t.Fatalf("Prepare changed the event:\n got %+v\nwant %+v", got, before)
		}
		for name, s := range map[string]string{"aggregate_type": aggType, "aggregate_id": aggID, "event_type": eventType} {
			if s == "" || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("accepted %s %q", name, s)
			}
		}
		if !json.Valid(payload) || !utf8.Valid(payload) {
			t.Fatalf("accepted a payload that is not UTF-8 JSON: %q", payload)
		}
		var v any
		if err := json.Unmarshal(payload, &v); err != nil {
			t.Fatalf("accepted payload does not decode: %v", err)
		}
		re, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("accepted payload does not encode again: %v", err)
		}
		if bytes.Contains(re, []byte("\uFFFD")) && !bytes.Contains(payload, []byte("\uFFFD")) &&
			!bytes.Contains(bytes.ToLower(payload), []byte(`\ufffd`)) {
			t.Fatalf("a decoder reads U+FFFD from the accepted payload %q, which holds none: text was replaced", payload)
		}
		if hasNUL(v) {
			t.Fatalf("accepted payload %q decodes to a NUL character", payload)
		}
		if ev.Headers != nil {
			b, err := json.Marshal(ev.Headers)
			if err != nil {
				t.Fatal(err)
			}
			var back map[string]string
			if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, ev.Headers) {
				t.Fatalf("headers %q do not survive a JSON round trip: %q", ev.Headers, back)
			}
		}
	})
}

// hasNUL reports whether a decoded JSON value holds a NUL character in a
// string or an object key.
func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		for _, e := range v {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) || hasNUL(e) {
				return true
			}
		}
	}
	return false
}
