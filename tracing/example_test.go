package tracing_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/txoutbox/outbox/tracing"
)

// InjectHeaders is the hook a backend's Config.ContextHeaders takes: it
// copies the caller's trace context into every enqueued event.
func ExampleInjectHeaders() {
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled,
	}))
	headers := map[string]string{}
	tracing.InjectHeaders(ctx, headers)
	fmt.Println(headers["traceparent"])
	// Output: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
}
