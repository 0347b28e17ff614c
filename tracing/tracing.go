package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txoutbox/outbox"
)

// propagator is the W3C Trace Context format: traceparent and tracestate.
var propagator = propagation.TraceContext{}

// InjectHeaders writes the W3C trace context of ctx's span into headers.
// It is the hook for the backends' Config.ContextHeaders.
func InjectHeaders(ctx context.Context, headers map[string]string) {
	propagator.Inject(ctx, propagation.MapCarrier(headers))
}

// Config configures a Publisher. The zero value is valid.
type Config struct {
	// TracerProvider receives the spans. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// System is the messaging.system attribute: "kafka", "rabbitmq",
	// "nats", "redis", "http", ... Default "outbox".
	System string
	// ChildOfProducer makes each publish span a child of the producer's
	// span (one trace from the request that enqueued to the consumer)
	// instead of the root of a trace of its own; it is linked to the
	// producer's span either way.
	ChildOfProducer bool
}

// instrumentationName names the tracer.
const instrumentationName = "github.com/txoutbox/outbox/tracing"

// Publisher starts the relay's publish spans; it implements
// relay.PublishTracer. It is safe for concurrent use.
type Publisher struct {
	tracer trace.Tracer
	system attribute.KeyValue
	child  bool
}

// NewPublisher returns a Publisher.
func NewPublisher(cfg Config) *Publisher {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if cfg.System == "" {
		cfg.System = "outbox"
	}
	return &Publisher{
		tracer: tp.Tracer(instrumentationName),
		system: attribute.String("messaging.system", cfg.System),
		child:  cfg.ChildOfProducer,
	}
}

// StartPublish starts one span per message and gives each message new
// headers that carry its span's trace context. The returned function ends
// the spans with the sink's results.
func (p *Publisher) StartPublish(ctx context.Context, msgs []outbox.Message, routes []string) func([]error) {
	spans := make([]trace.Span, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		route := "default"
		if i < len(routes) {
			route = routes[i]
		}
		producer := propagator.Extract(context.Background(), propagation.MapCarrier(m.Headers))
		parent := ctx
		if p.child {
			parent = trace.ContextWithRemoteSpanContext(ctx, trace.SpanContextFromContext(producer))
		}
		opts := []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(p.system,
				attribute.String("messaging.destination.name", route),
				attribute.String("messaging.message.id", m.EventID.String()),
				attribute.String("messaging.operation", "publish"),
				attribute.String("messaging.operation.type", "send"),
				attribute.String("outbox.aggregate_type", m.AggregateType),
				attribute.String("outbox.event_type", m.EventType),
				attribute.Int("outbox.attempt", m.Attempt),
			),
		}
		if sc := trace.SpanContextFromContext(producer); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
		if !p.child {
			opts = append(opts, trace.WithNewRoot())
		}
		spanCtx, span := p.tracer.Start(parent, "publish "+route, opts...)
		spans[i] = span
		if !span.SpanContext().IsValid() {
			continue // a no-op provider: keep the producer's trace context
		}
		h := make(map[string]string, len(m.Headers)+1)
		for k, v := range m.Headers {
			if k != "traceparent" && k != "tracestate" {
				h[k] = v
			}
		}
		propagator.Inject(spanCtx, propagation.MapCarrier(h))
		m.Headers = h
	}
	return func(results []error) {
		for i, span := range spans {
			if i < len(results) && results[i] != nil {
				span.RecordError(results[i])
				span.SetStatus(codes.Error, results[i].Error())
			}
			span.End()
		}
	}
}
