package main

import (
	"context"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/amqpsink"
)

// openAMQPSink opens amqp://user:pass@host:5672/vhost?exchange=outbox&routing_key=TEMPLATE;
// the --route overrides replace the routing key per aggregate type.
func openAMQPSink(ctx context.Context, raw string, opts sinkOptions) (sink.Sink, error) {
	cfg, err := amqpsink.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	cfg.RouteOverrides = opts.Routes
	cfg.Source = opts.cloudEventsSource(cfg.Source)
	cfg.Logger = opts.Logger
	return amqpsink.New(ctx, cfg)
}
