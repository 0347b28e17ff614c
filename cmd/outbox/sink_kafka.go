package main

import (
	"context"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/kafkasink"
)

// openKafkaSink opens kafka://host:9092[,host2:9092]?topic=TEMPLATE&...
// (see kafkasink.ParseURL); --route overrides the topic per aggregate type.
func openKafkaSink(ctx context.Context, raw string, opts sinkOptions) (sink.Sink, error) {
	cfg, err := kafkasink.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	cfg.RouteOverrides = opts.Routes
	cfg.Source = opts.cloudEventsSource(cfg.Source)
	cfg.Logger = opts.Logger
	return kafkasink.New(ctx, cfg)
}
