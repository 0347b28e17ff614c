package main

import (
	"context"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/redissink"
)

// openRedisSink opens redis://[user:pass@]host:6379/0?stream=TEMPLATE&maxlen=N
// (rediss:// for TLS; see redissink.ParseURL); --route overrides the stream
// per aggregate type.
func openRedisSink(ctx context.Context, raw string, opts sinkOptions) (sink.Sink, error) {
	cfg, err := redissink.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	cfg.RouteOverrides = opts.Routes
	cfg.Logger = opts.Logger
	return redissink.New(ctx, cfg)
}
