package eventlines

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

// FuzzRead feeds arbitrary input to Read, the JSON-lines reader of
// `outbox enqueue`. Input it refuses gets an error that matches
// ErrInvalidEvent and names the line ("line N") and, for a bad field, the
// field; nothing is returned to write. Input it accepts is read exactly as
// written: every event passes Validate, no U+FFFD appears in a text field
// that the line did not hold, and each event written back as a line reads
// back as the same event.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"aggregate_type":"payment","aggregate_id":"tx-1","event_type":"ApprovalRequested","payload":{"amount":15000},"headers":{"traceparent":"00-..."},"ttl":"66s"}`))
	f.Add([]byte("{\"aggregate_type\":\"payment\",\"aggregate_id\":\"tx-\xff\",\"event_type\":\"E\",\"payload\":{}}\n"))
	f.Add([]byte(`{"aggregate_type":"payment","aggregate_id":"tx-\ud800","event_type":"E","payload":{}}`))
	f.Add([]byte(`{"aggregate_type":"p","aggregate_id":"\ufffd","event_type":"E","payload":{},"headers":{"k\u00e9":"v"}}`))
	f.Add([]byte("{\"aggregate_type\":\"p\",\"aggregate_id\":\"a\",\"event_type\":\"E\",\"payload\":{},\"headers\":{\"x\xc3\":\"v\"}}"))
	f.Add([]byte(`{"event_id":"0190f3c4-1f5a-7b2e-9c3d-4e5f6a7b8c9d","aggregate_type":"p","aggregate_id":"a","event_type":"E","payload":[1],"expires_at":"2030-01-02T03:04:05.123Z","delay":"1s"}` + "\n\n" + `{"aggregate_type":"p","aggregate_id":"a","event_type":"E","payload":"x","available_at":"2030-01-02T03:04:05+09:00"}`))
	f.Add([]byte(`{"aggregate_type":5,"aggregate_id":"a","event_type":"E","payload":{}} {}`))
	f.Add([]byte(`{"aggregate_type":"p","aggregate_id":"a","event_type":"E","payload":{},"ttl":"soon","colour":1}`))
	limits := outbox.Limits{MaxPayloadBytes: 1 << 12}.WithDefaults()
	f.Fuzz(func(t *testing.T, input []byte) {
		events, lines, err := Read(bytes.NewReader(input), limits)
		if err != nil {
			if !errors.Is(err, outbox.ErrInvalidEvent) {
				t.Fatalf("refusal %q does not match ErrInvalidEvent", err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "line ") || !strings.HasSuffix(msg, "nothing was enqueued") {
				t.Fatalf("refusal %q does not name the line and say nothing was enqueued", msg)
			}
			if events != nil {
				t.Fatalf("refused input yet returned %d events", len(events))
			}
			return
		}
		if len(lines) != len(events) {
			t.Fatalf("%d events, %d line numbers", len(events), len(lines))
		}
		fffdIn := bytes.Contains(input, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(input), []byte(`\ufffd`))
		for i, ev := range events {
			if err := ev.Validate(limits); err != nil {
				t.Fatalf("event %d accepted but invalid: %v", i, err)
			}
			for _, s := range append([]string{ev.AggregateType, ev.AggregateID, ev.EventType}, headerTexts(ev.Headers)...) {
				if strings.Contains(s, "\uFFFD") && !fffdIn {
					t.Fatalf("event %d: %q holds U+FFFD the input did not: text was replaced", i, s)
				}
			}
			back, err := Parse(writeLine(t, ev))
			if err != nil {
				t.Fatalf("event %d written back as a line is refused: %v", i, err)
			}
			if !sameEvent(back, ev) {
				t.Fatalf("event %d does not survive being written back:\n got %+v\nwant %+v", i, back, ev)
			}
		}
	})
}

func headerTexts(h map[string]string) []string {
	var out []string
	for k, v := range h {
		out = append(out, k, v)
	}
	return out
}

// writeLine writes ev in the input format of `outbox enqueue`.
func writeLine(t *testing.T, ev outbox.Event) []byte {
	t.Helper()
	str := func(s string) string {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var b strings.Builder
	b.WriteString(`{"aggregate_type":` + str(ev.AggregateType) + `,"aggregate_id":` + str(ev.AggregateID) +
		`,"event_type":` + str(ev.EventType) + `,"payload":` + string(ev.Payload))
	if !ev.ID.IsZero() {
		b.WriteString(`,"event_id":` + str(ev.ID.String()))
	}
	if ev.Headers != nil {
		h, err := json.Marshal(ev.Headers)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(`,"headers":` + string(h))
	}
	if ev.TTL != 0 {
		b.WriteString(`,"ttl":` + str(ev.TTL.String()))
	}
	if ev.Delay != 0 {
		b.WriteString(`,"delay":` + str(ev.Delay.String()))
	}
	if !ev.ExpiresAt.IsZero() {
		b.WriteString(`,"expires_at":` + str(ev.ExpiresAt.Format(time.RFC3339Nano)))
	}
	if !ev.AvailableAt.IsZero() {
		b.WriteString(`,"available_at":` + str(ev.AvailableAt.Format(time.RFC3339Nano)))
	}
	b.WriteString("}")
	return []byte(b.String())
}

func sameEvent(a, b outbox.Event) bool {
	if !a.ExpiresAt.Equal(b.ExpiresAt) || !a.AvailableAt.Equal(b.AvailableAt) {
		return false
	}
	a.ExpiresAt, b.ExpiresAt, a.AvailableAt, b.AvailableAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if len(a.Headers) == 0 && len(b.Headers) == 0 {
		a.Headers, b.Headers = nil, nil
	}
	return reflect.DeepEqual(a, b)
}
