package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sort"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/discard"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/sink/sinkkit"
	"github.com/txoutbox/outbox/sink/stdoutsink"
)

// sinkOptions are what the CLI passes to every sink besides its URL.
type sinkOptions struct {
	// Routes are the --route overrides (aggregate type -> destination template).
	Routes map[string]string
	// Logger is the CLI's logger (its level, format and secret scrubbing).
	Logger *slog.Logger
	// Table is the outbox table the events come from: the CloudEvents
	// formats name it in their default source, /outbox/<table>.
	Table string
}

// cloudEventsSource returns the source= of a sink URL, or the default
// for the outbox table.
func (o sinkOptions) cloudEventsSource(given string) string {
	if given != "" {
		return given
	}
	return sinkkit.DefaultCloudEventsSource(o.Table)
}

// sinkOpener builds a sink from its URL and the options.
type sinkOpener func(ctx context.Context, raw string, opts sinkOptions) (sink.Sink, error)

// sinkKind is how the CLI opens the sinks of one URL scheme.
type sinkKind struct {
	open sinkOpener
	// connects is set for the sinks that connect to their destination in
	// the background (the brokers): the relay waits until they reached it
	// once before it claims events. The HTTP sink learns of its endpoint
	// from its requests only, and stdout and discard have nothing to reach.
	connects bool
}

// sinkKinds maps URL schemes to sinks: the one place that wires concrete
// sinks (their openers are in sink_*.go, one file per broker).
var sinkKinds = map[string]sinkKind{
	"http":  {open: openHTTPSink},
	"https": {open: openHTTPSink},
	"stdout": {open: func(context.Context, string, sinkOptions) (sink.Sink, error) {
		return stdoutsink.New(stdoutsink.Config{Writer: os.Stdout}), nil
	}},
	"discard": {open: func(context.Context, string, sinkOptions) (sink.Sink, error) { return discard.New(), nil }},
	"amqp":    {open: openAMQPSink, connects: true},
	"amqps":   {open: openAMQPSink, connects: true},
	"kafka":   {open: openKafkaSink, connects: true},
	"nats":    {open: openNATSSink, connects: true},
	"redis":   {open: openRedisSink, connects: true},
	"rediss":  {open: openRedisSink, connects: true},
}

func openHTTPSink(_ context.Context, raw string, opts sinkOptions) (sink.Sink, error) {
	cfg, err := httpsink.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	cfg.Source = opts.cloudEventsSource(cfg.Source)
	return httpsink.New(cfg)
}

func sinkForms() string {
	schemes := make([]string, 0, len(sinkKinds))
	for s := range sinkKinds {
		schemes = append(schemes, s+"://")
	}
	sort.Strings(schemes)
	return strings.Join(schemes, ", ")
}

// openSink builds the sink named by a URL.
func openSink(ctx context.Context, raw string, opts sinkOptions) (sink.Sink, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: no sink given: pass --sink or set OUTBOX_SINK (one of %s)", outbox.ErrInvalidConfig, sinkForms())
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("%w: sink %q is not a URL: use one of %s", outbox.ErrInvalidConfig, redactURL(raw), sinkForms())
	}
	kind, ok := sinkKinds[strings.ToLower(u.Scheme)]
	if !ok {
		return nil, fmt.Errorf("%w: unsupported sink scheme %q: use one of %s", outbox.ErrInvalidConfig, u.Scheme, sinkForms())
	}
	return kind.open(ctx, raw, opts)
}
