package benchkit

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/store/postgres"
)

var _ GatewaySystem = (*Outbox)(nil)

// GatewayLoad is Load.
func (o *Outbox) GatewayLoad(ctx context.Context, events []Event) error { return o.Load(ctx, events) }

// GatewayPending is Pending.
func (o *Outbox) GatewayPending(ctx context.Context) (int64, error) { return o.Pending(ctx) }

// StartGateway runs target.Relays relays, each as a separate process
// would: its own pool and postgres.Store, its own RelayID and its own
// httpsink.Sink POSTing to target.URL. Each sink may have one request in
// flight per aggregate (Concurrency = target.Aggregates, within the
// sink's bounds); the relays share the work the way the store shares it
// (one aggregate's run is claimed by one relay at a time).
func (o *Outbox) StartGateway(ctx context.Context, target GatewayTarget) (func() error, error) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		pools []*pgxpool.Pool
		sinks []*httpsink.Sink
		dones []chan error
	)
	stop := func() error {
		cancel()
		var errs []error
		for _, d := range dones {
			errs = append(errs, <-d)
		}
		for _, s := range sinks {
			errs = append(errs, s.Close(context.Background()))
		}
		for _, p := range pools {
			p.Close()
		}
		return errors.Join(errs...)
	}
	fail := func(err error) (func() error, error) {
		_ = stop()
		return nil, err
	}
	for i := range target.Relays {
		pool, err := o.env.NewPoolWith(ctx, max(o.RelayConns, 4), postgres.ConfigurePool)
		if err != nil {
			return fail(err)
		}
		pools = append(pools, pool)
		st, err := postgres.New(pool, o.storeCfg)
		if err != nil {
			return fail(err)
		}
		sk, err := httpsink.New(httpsink.Config{URL: target.URL, Concurrency: min(max(target.Aggregates, 1), httpsink.MaxConcurrency)})
		if err != nil {
			return fail(fmt.Errorf("http sink: %w", err))
		}
		sinks = append(sinks, sk)
		cfg := o.Relay
		cfg.Store, cfg.Sink = st, sk
		cfg.RelayID = fmt.Sprintf("bench-gateway-%d", i+1)
		r, err := relay.New(cfg)
		if err != nil {
			return fail(err)
		}
		done := make(chan error, 1)
		dones = append(dones, done)
		go func() { done <- r.Run(ctx) }()
	}
	return stop, nil
}
