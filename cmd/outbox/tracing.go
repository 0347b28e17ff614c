package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/tracing"
)

// tracingEnabled reports whether the standard OTLP variables ask for
// traces: an endpoint is set, and neither OTEL_SDK_DISABLED=true nor
// OTEL_TRACES_EXPORTER=none says otherwise.
func tracingEnabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// setupTracing returns the relay's publish tracer, exporting spans with
// OTLP/HTTP as the OTEL_EXPORTER_OTLP_* variables say, or nil (and no
// exporter at all) when they are unset. stop flushes and shuts it down.
func setupTracing(ctx context.Context, log *slog.Logger, sinkURL string) (tracer relay.PublishTracer, stop func(), err error) {
	if !tracingEnabled() {
		return nil, func() {}, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: the OTEL_EXPORTER_OTLP_* settings: %w", err)
	}
	name := os.Getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "outbox-relay"
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(name), semconv.ServiceVersion(version)))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: exporting spans failed", "err", err)
	}))
	log.Info("tracing: exporting publish spans with OTLP/HTTP", "service", name)
	stop = func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("tracing: flushing spans at exit failed", "err", err)
		}
	}
	return tracing.NewPublisher(tracing.Config{TracerProvider: tp, System: messagingSystem(sinkURL)}), stop, nil
}

// messagingSystem names the sink's system for the messaging.system attribute.
func messagingSystem(sinkURL string) string {
	u, err := url.Parse(sinkURL)
	if err != nil || u.Scheme == "" {
		return "outbox"
	}
	switch s := strings.ToLower(u.Scheme); s {
	case "http", "https":
		return "http"
	case "amqp", "amqps":
		return "rabbitmq"
	case "redis", "rediss":
		return "redis"
	default:
		return s
	}
}
