package tracing_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store/sqlite"
	"github.com/txoutbox/outbox/tracing"
)

// captureSink records the headers each message arrived with; it fails
// the first attempt of aggregate "flaky".
type captureSink struct {
	mu      sync.Mutex
	headers map[string][]map[string]string // aggregate id -> headers per attempt
}

func (c *captureSink) Publish(_ context.Context, msgs []outbox.Message) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]error, len(msgs))
	for i, m := range msgs {
		c.headers[m.AggregateID] = append(c.headers[m.AggregateID], m.Headers)
		if m.AggregateID == "flaky" && m.Attempt == 1 {
			out[i] = errors.New("gateway said 503")
		}
	}
	return out
}
func (c *captureSink) Close(context.Context) error { return nil }

type setup struct {
	store *sqlite.Store
	sink  *captureSink
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "o.db"), sqlite.Config{ContextHeaders: tracing.InjectHeaders})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	return &setup{store: s, sink: &captureSink{headers: map[string][]map[string]string{}}}
}

// enqueue writes one event per aggregate id in ctx's span.
func (s *setup) enqueue(t *testing.T, ctx context.Context, aggs ...string) []outbox.EventID {
	t.Helper()
	tx, err := s.store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var events []outbox.Event
	for _, a := range aggs {
		events = append(events, outbox.Event{AggregateType: "payment", AggregateID: a, EventType: "ApprovalRequested",
			Payload: []byte(`{}`), Headers: map[string]string{"x-correlation-id": "corr-" + a}})
	}
	ids, err := s.store.Enqueue(ctx, tx, events...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return ids
}

func (s *setup) drain(t *testing.T, tracer relay.PublishTracer) {
	t.Helper()
	r, err := relay.New(relay.Config{Store: s.store, Sink: s.sink, Tracer: tracer, BackoffMin: time.Millisecond,
		BackoffMax: 2 * time.Millisecond, PollInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatal(err)
	}
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// spanOf parses a traceparent header.
func spanOf(t *testing.T, headers map[string]string) trace.SpanContext {
	t.Helper()
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(headers))
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		t.Fatalf("headers %v carry no valid traceparent", headers)
	}
	return sc
}

// TestTraceContextEndToEnd: the producer's span is stored with the event;
// the relay's publish span links to it, carries the messaging attributes,
// and is the one the sink receives.
func TestTraceContextEndToEnd(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	s := newSetup(t)
	ctx, producer := tp.Tracer("app").Start(context.Background(), "POST /payments")
	ids := s.enqueue(t, ctx, "tx-1", "flaky")
	producer.End()

	rec, err := s.store.GetEvent(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := spanOf(t, rec.Headers); got.TraceID() != producer.SpanContext().TraceID() || got.SpanID() != producer.SpanContext().SpanID() {
		t.Fatalf("stored traceparent %q is not the producer's span %s", rec.Headers["traceparent"], producer.SpanContext().SpanID())
	}
	if rec.Headers["x-correlation-id"] != "corr-tx-1" {
		t.Errorf("the event's own header was lost: %v", rec.Headers)
	}

	s.drain(t, tracing.NewPublisher(tracing.Config{TracerProvider: tp, System: "kafka"}))

	var publishes []sdktrace.ReadOnlySpan
	for _, sp := range sr.Ended() {
		if sp.Name() == "publish default" {
			publishes = append(publishes, sp)
		}
	}
	if len(publishes) != 3 { // tx-1, flaky twice
		t.Fatalf("%d publish spans, want 3", len(publishes))
	}
	failedSpans := 0
	for _, sp := range publishes {
		if sp.SpanKind() != trace.SpanKindProducer {
			t.Errorf("span kind %s, want producer", sp.SpanKind())
		}
		if len(sp.Links()) != 1 || sp.Links()[0].SpanContext.SpanID() != producer.SpanContext().SpanID() {
			t.Errorf("publish span links %v, want the producer's span", sp.Links())
		}
		if sp.Parent().IsValid() || sp.SpanContext().TraceID() == producer.SpanContext().TraceID() {
			t.Errorf("publish span is in the producer's trace; want a root linked to it")
		}
		for key, want := range map[string]string{"messaging.system": "kafka", "messaging.destination.name": "default",
			"messaging.operation": "publish", "messaging.operation.type": "send"} {
			if got := attr(sp, key).AsString(); got != want {
				t.Errorf("%s = %q, want %q", key, got, want)
			}
		}
		if id := attr(sp, "messaging.message.id").AsString(); id != ids[0].String() && id != ids[1].String() {
			t.Errorf("messaging.message.id = %q", id)
		}
		if sp.Status().Code == codes.Error {
			failedSpans++
			if sp.Status().Description != "gateway said 503" {
				t.Errorf("error status %q", sp.Status().Description)
			}
		}
	}
	if failedSpans != 1 {
		t.Errorf("%d spans marked failed, want 1 (flaky's first attempt)", failedSpans)
	}
	// What the sink received is the publish span of that attempt.
	bySpan := map[trace.SpanID]bool{}
	for _, sp := range publishes {
		bySpan[sp.SpanContext().SpanID()] = true
	}
	for agg, attempts := range s.sink.headers {
		for _, h := range attempts {
			if sc := spanOf(t, h); !bySpan[sc.SpanID()] {
				t.Errorf("%s arrived with traceparent %q, not a publish span's", agg, h["traceparent"])
			}
			if h["x-correlation-id"] != "corr-"+agg {
				t.Errorf("%s arrived without its own header: %v", agg, h)
			}
		}
	}
	// The row still holds the producer's trace context.
	rec, _ = s.store.GetEvent(context.Background(), ids[0])
	if spanOf(t, rec.Headers).SpanID() != producer.SpanContext().SpanID() {
		t.Errorf("the relay rewrote the stored traceparent")
	}
}

func TestChildOfProducer(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	s := newSetup(t)
	ctx, producer := tp.Tracer("app").Start(context.Background(), "POST /payments")
	s.enqueue(t, ctx, "tx-1")
	producer.End()
	s.drain(t, tracing.NewPublisher(tracing.Config{TracerProvider: tp, ChildOfProducer: true}))
	for _, sp := range sr.Ended() {
		if sp.Name() != "publish default" {
			continue
		}
		if sp.Parent().SpanID() != producer.SpanContext().SpanID() || sp.SpanContext().TraceID() != producer.SpanContext().TraceID() {
			t.Errorf("publish span parent %s, want the producer's span %s", sp.Parent().SpanID(), producer.SpanContext().SpanID())
		}
		if attr(sp, "messaging.system").AsString() != "outbox" {
			t.Errorf("default messaging.system = %q", attr(sp, "messaging.system").AsString())
		}
		return
	}
	t.Fatal("no publish span")
}

// TestNoProviderKeepsTheProducersContext: with otel's no-op provider the
// messages carry the producer's traceparent unchanged; without a span at
// Enqueue, nothing is added.
func TestNoProviderKeepsTheProducersContext(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	s := newSetup(t)
	ctx, producer := tp.Tracer("app").Start(context.Background(), "POST /payments")
	s.enqueue(t, ctx, "tx-1")
	s.enqueue(t, context.Background(), "no-span")
	producer.End()
	s.drain(t, tracing.NewPublisher(tracing.Config{TracerProvider: noop.NewTracerProvider()}))
	if sc := spanOf(t, s.sink.headers["tx-1"][0]); sc.SpanID() != producer.SpanContext().SpanID() {
		t.Errorf("message traceparent %s, want the producer's %s", sc.SpanID(), producer.SpanContext().SpanID())
	}
	if h := s.sink.headers["no-span"][0]; h["traceparent"] != "" || h["x-correlation-id"] != "corr-no-span" {
		t.Errorf("an event enqueued outside any span arrived with headers %v", h)
	}
}
