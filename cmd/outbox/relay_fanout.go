package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/internal/destconfig"
	"github.com/txoutbox/outbox/internal/fanout"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// loadDestinations reads the --config file; a file with problems prints
// every one to stderr and ends the command with exit code 1.
func (c *RelayCmd) loadDestinations(g *Globals) (*destconfig.Config, error) {
	return loadDestinationsFile(g, g.Config)
}

// loadDestinationsFile reads a destinations file and keeps the secrets of
// its URLs out of the logs; a file with problems prints every one to
// stderr and ends the command with exit code 1.
func loadDestinationsFile(g *Globals, file string) (*destconfig.Config, error) {
	cfg, err := destconfig.Load(file)
	if err != nil {
		return nil, fileRefused(g, file, err)
	}
	for _, d := range cfg.Destinations {
		g.secrets.addURL(d.URL)
	}
	return cfg, nil
}

// fileRefused prints a destinations file's problems and returns the
// command's exit.
func fileRefused(g *Globals, file string, err error) error {
	fmt.Fprintln(g.stderr, g.secrets.redact(err.Error()))
	var fe *destconfig.Error
	if errors.As(err, &fe) {
		return &exitError{code: 1, err: fmt.Errorf("destinations file %s refused: %d problem(s) to fix, listed above", file, len(fe.Problems))}
	}
	var ue *destconfig.UnmatchedError
	if errors.As(err, &ue) {
		return &exitError{code: 1, err: fmt.Errorf("destinations file %s refused: events already in the table have no route, listed above", file)}
	}
	return &exitError{code: 1, err: fmt.Errorf("destinations file %s could not be read", file)}
}

// fanOutFlags refuses the flags that a destinations file replaces.
func (c *RelayCmd) fanOutFlags() error {
	bad := func(flag, why string) error {
		return fmt.Errorf("%w: %s cannot be used with --config: %s", outbox.ErrInvalidConfig, flag, why)
	}
	switch {
	case c.Sink != "":
		return bad("--sink", "the destinations file says where events go; give --sink or --config, not both")
	case len(c.Route) > 0:
		return bad("--route", "name the destination (topic, subject, stream, queue) in the destination's URL")
	case len(c.RouteLimit) > 0:
		return bad("--route-limit", "give the limits in the destination's URL (rate=, burst=, max_in_flight=)")
	}
	return nil
}

// fanOutLeg is one relay of a fan-out: the router on the outbox table, or
// the relay of one destination table.
type fanOutLeg struct {
	name  string // the destination; "" for the router
	table string
	relay *relay.Relay
}

// runFanOut runs `outbox relay --config FILE`: a router relay on the
// outbox table whose sink copies each event into its destinations'
// tables, and one relay per destination table with that destination's
// sink, all in this process.
func (c *RelayCmd) runFanOut(ctx context.Context, g *Globals) error {
	if err := c.fanOutFlags(); err != nil {
		return err
	}
	cfg, err := c.loadDestinations(g)
	if err != nil {
		return err
	}
	tables, err := cfg.Tables(g.Table)
	if err != nil {
		return fileRefused(g, g.Config, err)
	}
	base, err := c.relayBase(g)
	if err != nil {
		return err
	}
	anchorKey, err := c.anchorKey()
	if err != nil {
		return err
	}
	if c.RelayID == "" {
		c.RelayID = relay.NewRelayID()
	}
	var adminSrv *adminServer
	closeAdminAPI := func() error { return nil }
	if c.Admin != "" { // bound first: a busy port fails before any other work
		if adminSrv, err = listenAdmin(c.Admin, g.logger); err != nil {
			return err
		}
		defer func() {
			adminSrv.close()
			_ = closeAdminAPI() // once no request can be in flight
		}()
	}
	b, err := openBackendWaiting(ctx, g.DB, g.Table, c.StartWait, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	if err := checkMigrated(ctx, b.store, g.Table, "run `outbox migrate` first"); err != nil {
		return err
	}
	if err := checkEventTypes(ctx, b.store, cfg); err != nil {
		return fileRefused(g, g.Config, err)
	}
	// Every leg opens the sealed payloads it copied with the data keys of
	// the outbox table they came from.
	base.Keys = b.store

	legMetrics := c.newFanOutMetrics(g, adminSrv, b.store)
	defer legMetrics.stop()
	var dests []fanout.Destination
	var adminDests []admin.Destination
	var legs []fanOutLeg
	for _, d := range cfg.Destinations {
		table := tables[d.Name]
		db, err := openDestinationTable(ctx, g, d.Name, table)
		if err != nil {
			return err
		}
		defer db.close()
		sk, err := openSinkLimited(ctx, d.URL, nil, sinkOptions{Logger: g.logger, Table: table})
		if err != nil {
			return fmt.Errorf("destination %s: %w", d.Name, err)
		}
		defer closeSink(ctx, sk, g.logger)
		if err := waitForSink(ctx, d.URL, sk, c.StartWait, g.logger); err != nil {
			return fmt.Errorf("destination %s: %w", d.Name, err)
		}
		rc := base
		rc.Store, rc.Sink, rc.RelayID = db.store, sk, c.RelayID
		rc.Logger = g.logger.With("destination", d.Name, "table", table)
		if rc.Observer, err = legMetrics.add(ctx, d.Name, db.store); err != nil {
			return err
		}
		r, err := relay.New(rc)
		if err != nil {
			return fmt.Errorf("destination %s: %w", d.Name, err)
		}
		dests = append(dests, fanout.Destination{Name: d.Name, Table: table, Store: db.store})
		adminDests = append(adminDests, admin.Destination{Name: d.Name, Table: table, URL: d.RedactedURL(), Store: db.store})
		legs = append(legs, fanOutLeg{name: d.Name, table: table, relay: r})
	}
	router, err := fanout.NewRouter(cfg, g.Table, dests)
	if err != nil {
		return err
	}
	// The router reads the outbox table as a single-sink relay would: by
	// polling, or from the WAL or the binary log. The destination tables
	// are polled (and woken by their copies).
	routerStore := b.store
	switch c.Source {
	case "logical":
		src, err := c.openLogicalSource(ctx, g, b)
		if err != nil {
			return err
		}
		routerStore = src
		legMetrics.collect(slotLagGauge(src), slotRecreationsCounter(src))
	case "binlog":
		src, err := c.openBinlogSource(ctx, g, b)
		if err != nil {
			return err
		}
		defer src.Close()
		routerStore = src
		legMetrics.collect(binlogCollectors(src)...)
	}
	rc := base
	rc.Store, rc.Sink, rc.RelayID = routerStore, router, c.RelayID
	rc.Logger = g.logger.With("stage", "router", "table", g.Table)
	if rc.Observer, err = legMetrics.add(ctx, "", b.store); err != nil {
		return err
	}
	rr, err := relay.New(rc)
	if err != nil {
		return err
	}
	if adminSrv != nil && c.AdminAuth.enabled() {
		h, err := c.AdminAuth.handler(g, c.Admin, b.store, base.OnFailure, nil, adminDests)
		if err != nil {
			return err
		}
		closeAdminAPI = h.Close
		adminSrv.mountAdminAPI(h)
	}
	legMetrics.serve()
	stopHeartbeat := heartbeat(ctx, b.store, c.RelayID, c.Heartbeat, func() int { return 0 }, g.logger)
	defer stopHeartbeat()
	anchored := []anchoredTable{{g.Table, b.store}}
	for _, d := range adminDests {
		anchored = append(anchored, anchoredTable{d.Table, d.Store})
	}
	stopAnchors := c.startAnchors(ctx, g.logger, anchorKey, anchored)
	defer stopAnchors()

	names := make([]string, 0, len(legs))
	for _, l := range legs {
		names = append(names, l.name+" ("+l.table+", "+redactURL(destURL(cfg, l.name))+")")
	}
	g.logger.Info("relay configured", "table", g.Table, "backend", b.kind, "source", c.Source, "config", g.Config, "destinations", strings.Join(names, "; "))
	all := append([]fanOutLeg{{table: g.Table, relay: rr}}, legs...)
	stopProgress := c.reportFanOutProgress(ctx, g.logger, all)
	defer stopProgress()

	start := time.Now()
	if c.Drain {
		err = drainFanOut(ctx, rr, legs)
	} else {
		err = runLegs(ctx, all, (*relay.Relay).Run)
	}
	elapsed := time.Since(start)
	for _, l := range all {
		st := l.relay.Stats()
		what := "routed"
		if l.name != "" {
			what = "delivered"
		}
		g.logger.Info("relay finished", "destination", l.name, "table", l.table, what, st.Delivered, "retried", st.Retried,
			"failed", st.Failed, "expired", st.Expired+st.SweptExpired, "elapsed", elapsed.Round(time.Millisecond))
	}
	if errors.Is(err, context.Canceled) && c.Drain {
		return fmt.Errorf("drain interrupted before it finished")
	}
	return err
}

// openDestinationTable opens the store of a destination's table and
// refuses a table that is missing or behind, saying how to create it.
func openDestinationTable(ctx context.Context, g *Globals, name, table string) (*backend, error) {
	db, err := openBackend(ctx, g.DB, table, outbox.Limits{}, g.logger)
	if err != nil {
		return nil, fmt.Errorf("destination %s: %w", name, err)
	}
	if err := checkMigrated(ctx, db.store, table, fmt.Sprintf("create it with `outbox migrate --config %s`", g.Config)); err != nil {
		db.close()
		return nil, fmt.Errorf("destination %s: %w", name, err)
	}
	return db, nil
}

// checkEventTypes refuses a file that routes none of the event types of
// the outbox's unfinished events.
func checkEventTypes(ctx context.Context, st store.Store, cfg *destconfig.Config) error {
	types, err := st.EventTypes(ctx)
	if err != nil {
		return fmt.Errorf("reading the event types of the outbox's unfinished events: %w", err)
	}
	pairs := make([]destconfig.TypePair, len(types))
	for i, t := range types {
		pairs[i] = destconfig.TypePair{EventType: t.EventType, AggregateType: t.AggregateType}
	}
	return cfg.CheckTypes(pairs)
}

// runLegs runs f on every leg at once until all return; the first error
// stops the others.
func runLegs(ctx context.Context, legs []fanOutLeg, f func(*relay.Relay, context.Context) error) error {
	eg, ctx := errgroup.WithContext(ctx)
	for _, l := range legs {
		eg.Go(func() error {
			err := f(l.relay, ctx)
			switch {
			case err == nil:
				return nil
			case l.name == "":
				return fmt.Errorf("router: %w", err)
			default:
				return fmt.Errorf("destination %s: %w", l.name, err)
			}
		})
	}
	return eg.Wait()
}

// drainFanOut drains the outbox table into the destination tables while
// the destinations' relays deliver, then drains each destination table.
func drainFanOut(ctx context.Context, router *relay.Relay, legs []fanOutLeg) error {
	runCtx, stopRuns := context.WithCancel(ctx)
	routeCtx, stopRouting := context.WithCancel(ctx)
	defer stopRouting()
	runs := make(chan error, 1)
	go func() {
		err := runLegs(runCtx, legs, (*relay.Relay).Run)
		if err != nil {
			stopRouting() // a destination's relay failed: the drain cannot finish
		}
		runs <- err
	}()
	err := router.Drain(routeCtx)
	stopRuns()
	if rerr := <-runs; rerr != nil {
		return rerr
	}
	if err != nil {
		return fmt.Errorf("router: %w", err)
	}
	return runLegs(ctx, legs, (*relay.Relay).Drain)
}

// destURL is the URL of the named destination.
func destURL(cfg *destconfig.Config, name string) string {
	for _, d := range cfg.Destinations {
		if d.Name == name {
			return d.URL
		}
	}
	return ""
}

// closeSink closes a sink within 10 s.
func closeSink(ctx context.Context, sk sink.Sink, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := sk.Close(cctx); err != nil {
		log.Warn("closing the sink", "err", err)
	}
}

// reportFanOutProgress logs, every --progress, what the router routed and
// what each destination delivered.
func (c *RelayCmd) reportFanOutProgress(ctx context.Context, log *slog.Logger, legs []fanOutLeg) func() {
	if c.Progress <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(c.Progress)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				attrs := make([]any, 0, 2*len(legs))
				for _, l := range legs {
					st := l.relay.Stats()
					key := "routed"
					if l.name != "" {
						key = l.name
					}
					attrs = append(attrs, key, fmt.Sprintf("%d delivered, %d retried, %d failed", st.Delivered, st.Retried, st.Failed))
				}
				log.Info("progress", attrs...)
			}
		}
	}()
	return func() { cancel(); <-done }
}
