package outbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/txoutbox/outbox"
)

type ctxKey struct{}

// headerWriter is a Writer that takes a trace id from the context.
type headerWriter struct{ written []outbox.Event }

func (w *headerWriter) EnqueueLimits() outbox.Limits { return outbox.Limits{} }
func (w *headerWriter) WriteEvents(_ context.Context, _ struct{}, events []outbox.Event) error {
	w.written = events
	return nil
}
func (w *headerWriter) ContextHeaders(ctx context.Context, h map[string]string) {
	if v, ok := ctx.Value(ctxKey{}).(string); ok {
		h["traceparent"] = v
		h["x-tenant"] = "from-context"
	}
}

func TestEnqueueAddsContextHeaders(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := context.WithValue(context.Background(), ctxKey{}, tp)
	own := map[string]string{"x-tenant": "own"}
	events := []outbox.Event{
		{AggregateType: "payment", AggregateID: "1", EventType: "E", Payload: []byte(`{}`), Headers: own},
		{AggregateType: "payment", AggregateID: "2", EventType: "E", Payload: []byte(`{}`)},
	}
	w := &headerWriter{}
	if _, err := outbox.Enqueue(ctx, w, struct{}{}, events...); err != nil {
		t.Fatal(err)
	}
	if h := w.written[0].Headers; h["traceparent"] != tp || h["x-tenant"] != "own" {
		t.Errorf("first event headers %v: want the context's traceparent and its own x-tenant", h)
	}
	if h := w.written[1].Headers; h["traceparent"] != tp || h["x-tenant"] != "from-context" {
		t.Errorf("second event headers %v", h)
	}
	if len(own) != 1 || events[1].Headers != nil {
		t.Errorf("the caller's events were modified: %v, %v", own, events[1].Headers)
	}
	// Without a value in the context nothing is added.
	if _, err := outbox.Enqueue(context.Background(), w, struct{}{}, events[1]); err != nil {
		t.Fatal(err)
	}
	if len(w.written[0].Headers) != 0 {
		t.Errorf("headers added without context: %v", w.written[0].Headers)
	}
	// Added headers are validated like the event's own.
	bad := context.WithValue(context.Background(), ctxKey{}, "bad\nvalue")
	if _, err := outbox.Enqueue(bad, w, struct{}{}, events[1]); !errors.Is(err, outbox.ErrInvalidEvent) {
		t.Errorf("a control character from the context: %v, want ErrInvalidEvent", err)
	}
}
