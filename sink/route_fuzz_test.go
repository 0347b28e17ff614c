package sink_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

// FuzzRouter checks routing templates: NewRouter returns (it once looped
// forever on "{event_{aggregate_type}type}"), refuses with ErrInvalidConfig
// and a message about the template, or accepts a template that Route
// expands exactly as reading it from left to right would: each placeholder
// replaced by its field, every other byte kept, no brace of the template
// left over. An override applies to its aggregate type only.
func FuzzRouter(f *testing.F) {
	f.Add("{aggregate_type}.events", "merchant", "merchant.audit", "payment", "tx-1", "ApprovalRequested")
	f.Add("svc.{aggregate_type}.{aggregate_id}.{event_type}.v1", "fixed", "audit.all", "fixed", "a.b", "E")
	f.Add("{event_{aggregate_type}type}", "m", "x", "payment", "1", "E")
	f.Add("{aggregate}.events", "", "", "p", "i", "e")
	f.Add("a}b", "m", "{event_type", "m", "i", "e")
	f.Add("{aggregate_type}{aggregate_id}{event_type}", "m", "{{aggregate_id}}", "m", "{aggregate_type}", "}")
	f.Add(" ", "k", "\t", "k", "", "")
	f.Fuzz(func(t *testing.T, template, overType, override, aggType, aggID, eventType string) {
		overrides := map[string]string{}
		if overType != "" {
			overrides[overType] = override
		}
		r, err := sink.NewRouter(template, overrides)
		if err != nil {
			if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "route") {
				t.Fatalf("refusal %q does not match ErrInvalidConfig or does not say it is about the route", err)
			}
			return
		}
		want := template
		if want == "" {
			want = sink.DefaultRoute
		}
		if o, ok := overrides[aggType]; ok {
			want = o
		}
		m := outbox.Message{AggregateType: aggType, AggregateID: aggID, EventType: eventType}
		exp, ok := expand(want, &m)
		if !ok {
			t.Fatalf("template %q accepted, but it has a brace that is not a placeholder", want)
		}
		if got := r.Route(&m); got != exp {
			t.Fatalf("Route with template %q = %q, want %q", want, got, exp)
		}
	})
}

// expand is the reference reading of a template: left to right, each
// placeholder replaced; false if a brace stands outside a placeholder.
func expand(t string, m *outbox.Message) (string, bool) {
	fields := []struct{ p, v string }{
		{"{aggregate_type}", m.AggregateType}, {"{aggregate_id}", m.AggregateID}, {"{event_type}", m.EventType},
	}
	var b strings.Builder
next:
	for i := 0; i < len(t); {
		for _, f := range fields {
			if strings.HasPrefix(t[i:], f.p) {
				b.WriteString(f.v)
				i += len(f.p)
				continue next
			}
		}
		if t[i] == '{' || t[i] == '}' {
			return "", false
		}
		b.WriteByte(t[i])
		i++
	}
	return b.String(), true
}
