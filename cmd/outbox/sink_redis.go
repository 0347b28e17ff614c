package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"

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
	redisClientLogOnce.Do(func() { redis.SetLogger(redisClientLog{opts.Logger}) })
	return redissink.New(ctx, cfg)
}

// redisClientLogOnce installs redisClientLog once per process: the Redis
// client's logger is process-wide, and the CLI owns the process.
var redisClientLogOnce sync.Once

// redisClientLog takes the Redis client's own log lines, which it would
// print on stderr in a format of its own (every failed dial, beside the
// sink's WARN that says the same), and passes them to the CLI's logger at
// DEBUG, where its secret scrubbing applies. The sink reports its
// connection state itself.
type redisClientLog struct{ log *slog.Logger }

func (l redisClientLog) Printf(ctx context.Context, format string, v ...any) {
	if l.log != nil {
		l.log.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
	}
}
