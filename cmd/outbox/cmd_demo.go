package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/cmd/outbox/internal/demo"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// DemoCmd runs the QR-payment scenario end to end: a payment service, a
// mock payment gateway and an in-process Kafka broker fed from one outbox
// table through a destinations file, two relays and seven scripted
// incidents, then a summary that checks the guarantees. The scenario is package demo; this
// command gives it the CLI's stores, sinks and secret scrubbing.
type DemoCmd struct {
	Short     bool          `help:"A short run for CI: a few seconds (QR lifetime compressed 22x unless --time-scale is given)." env:"OUTBOX_DEMO_SHORT"`
	TimeScale float64       `help:"Compress time: the 66s QR lifetime runs as 66s divided by this, 1 to 100 (default 10; 22 with --short)." env:"OUTBOX_DEMO_TIME_SCALE" placeholder:"N"`
	Rate      float64       `help:"QR confirmations per second (default 25)." env:"OUTBOX_DEMO_RATE" placeholder:"N"`
	Latency   time.Duration `help:"Mean time the mock gateway takes per request." default:"20ms" env:"OUTBOX_DEMO_LATENCY"`
	FailRate  float64       `help:"Share of gateway requests answered 503 at random, 0 to 0.5." default:"0.02" env:"OUTBOX_DEMO_FAIL_RATE" placeholder:"SHARE"`
	Outage    time.Duration `help:"How long the gateway is down in incident 1 (default 2.5s; 0.6s with --short)." env:"OUTBOX_DEMO_OUTAGE"`
	Seed      uint64        `help:"Seed of the random traffic (0: pick one; it is printed)." env:"OUTBOX_DEMO_SEED" placeholder:"N"`
	Keep      bool          `help:"Keep the database afterwards: the temporary SQLite file, or the demo's tables with --db." env:"OUTBOX_DEMO_KEEP"`
	JSON      bool          `name:"json" help:"Also print the summary as one JSON object on the last line."`
	Quiet     bool          `help:"No live progress (incidents and the summary are still printed)." env:"OUTBOX_DEMO_QUIET"`
}

// Run runs the demo; a broken guarantee exits 1.
func (c *DemoCmd) Run(ctx context.Context, g *Globals) error {
	err := demo.Run(ctx, demo.Options(*c), demo.Env{
		Stdout: g.stdout,
		Logger: g.logger,
		DB:     g.DB,
		OpenBackend: func(ctx context.Context, dsn, table string) (*demo.Backend, error) {
			b, err := openBackend(ctx, dsn, table, outbox.Limits{}, g.logger)
			if err != nil {
				return nil, err
			}
			return &demo.Backend{Store: b.store, Kind: b.kind, Close: b.close}, nil
		},
		OpenSink: func(ctx context.Context, url string, log *slog.Logger) (sink.Sink, error) {
			return openSink(ctx, url, sinkOptions{Logger: log})
		},
		ShowEvent: func(ctx context.Context, w io.Writer, s store.Store, id outbox.EventID) error {
			return ShowEvent(ctx, w, s, id, false)
		},
		Redact:    g.secrets.redact,
		RedactURL: redactURL,
	})
	if errors.Is(err, demo.ErrGuaranteeBroken) {
		return &exitError{code: 1, err: err}
	}
	return err
}
