package main

import (
	"context"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/natssink"
)

// openNATSSink opens nats://host:4222?subject=TEMPLATE&stream=OUTBOX; the
// --route overrides replace the subject per aggregate type.
func openNATSSink(ctx context.Context, raw string, opts sinkOptions) (sink.Sink, error) {
	cfg, err := natssink.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	cfg.RouteOverrides = opts.Routes
	cfg.Source = opts.cloudEventsSource(cfg.Source)
	cfg.Logger = opts.Logger
	return natssink.New(ctx, cfg)
}
