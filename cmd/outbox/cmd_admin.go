package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/store"
)

// AdminAuth are the admin handler's flags, shared by `outbox admin` and
// `outbox relay --admin`. The tokens themselves are never flags (they
// would show in the process list): a file, or OUTBOX_ADMIN_TOKENS.
type AdminAuth struct {
	TokensFile     string `help:"File of admin API tokens, one 'ROLE NAME TOKEN' a line (ROLE: viewer or operator); OUTBOX_ADMIN_TOKENS holds the same lines." env:"TOKENS_FILE" placeholder:"FILE"`
	InsecureNoAuth bool   `help:"Serve the admin API and dashboard without authentication, everyone an operator; only on a loopback address."`
	RedactPayloads bool   `help:"Hide payloads and header values from viewers."`
}

// AdminCmd serves the admin API and the dashboard without a relay.
type AdminCmd struct {
	Listen    string   `help:"Address of the admin API and dashboard." default:"127.0.0.1:9465" env:"OUTBOX_ADMIN_LISTEN" placeholder:"ADDR"`
	OnFailure string   `help:"The relays' policy (block or continue): with block, events behind a FAILED one are blocked aggregates." default:"block" enum:"block,continue" env:"OUTBOX_ADMIN_ON_FAILURE"`
	Route     []string `help:"The relays' per-aggregate-type destinations (as relay --route), for the route filter and the failure groups." env:"OUTBOX_ADMIN_ROUTE" placeholder:"TYPE=DEST"`
	AdminAuth `envprefix:"OUTBOX_ADMIN_"`
}

// Run serves until SIGINT/SIGTERM.
func (c *AdminCmd) Run(ctx context.Context, g *Globals) error {
	srv, err := listenAdminAuth(c.Listen, g.logger, !c.InsecureNoAuth)
	if err != nil {
		return err
	}
	var h *admin.Handler
	var closers []func() // the stores, closed once the handler is
	defer func() {
		srv.close()
		if h != nil {
			_ = h.Close() // once no request can be in flight
		}
		for _, f := range slices.Backward(closers) {
			f()
		}
	}()
	policy, err := relay.ParseFailurePolicy(c.OnFailure)
	if err != nil {
		return err
	}
	routes, err := sink.ParseRouteOverrides(c.Route)
	if err != nil {
		return err
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	closers = append(closers, b.close)
	if err := checkMigrated(ctx, b.store, g.Table, "run `outbox migrate` first"); err != nil {
		return err
	}
	dests, err := c.destinations(ctx, g, &closers)
	if err != nil {
		return err
	}
	if h, err = c.handler(g, c.Listen, b.store, policy, routes, dests); err != nil {
		return err
	}
	srv.mountAdminAPI(h)
	srv.serve()
	<-ctx.Done()
	return nil
}

// destinations opens a store on the table of each destination of the
// --config file, for the Destinations page; none without --config. Each
// store's close is added to closers.
func (c *AdminCmd) destinations(ctx context.Context, g *Globals, closers *[]func()) ([]admin.Destination, error) {
	if g.Config == "" {
		return nil, nil
	}
	cfg, err := loadDestinationsFile(g, g.Config)
	if err != nil {
		return nil, err
	}
	tables, err := cfg.Tables(g.Table)
	if err != nil {
		return nil, fileRefused(g, g.Config, err)
	}
	var out []admin.Destination
	for _, d := range cfg.Destinations {
		table := tables[d.Name]
		db, err := openDestinationTable(ctx, g, d.Name, table)
		if err != nil {
			return nil, err
		}
		*closers = append(*closers, db.close)
		out = append(out, admin.Destination{Name: d.Name, Table: table, URL: d.RedactedURL(), Store: db.store})
	}
	return out, nil
}

// enabled reports whether the flags ask for the admin handler at all.
func (a AdminAuth) enabled() bool {
	return a.TokensFile != "" || a.InsecureNoAuth || os.Getenv("OUTBOX_ADMIN_TOKENS") != ""
}

// handler builds the admin handler for a listener on addr; dests are the
// destinations of a fan-out (nil: the page shows st alone).
func (a AdminAuth) handler(g *Globals, addr string, st store.Store, policy relay.FailurePolicy, routes map[string]string, dests []admin.Destination) (*admin.Handler, error) {
	if a.InsecureNoAuth {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || !loopback(host) {
			return nil, fmt.Errorf("%w: --insecure-no-auth is allowed only on a loopback address (127.0.0.1, ::1, localhost), not %q: give tokens with --tokens-file or OUTBOX_ADMIN_TOKENS",
				outbox.ErrInvalidConfig, addr)
		}
	}
	env := os.Getenv("OUTBOX_ADMIN_TOKENS")
	tokens, err := admin.LoadTokens(a.TokensFile, env)
	if err != nil {
		return nil, err
	}
	for _, t := range tokens {
		g.secrets.add(t.Token)
	}
	router, err := sink.NewRouter("", routes)
	if err != nil {
		return nil, err
	}
	return admin.New(admin.Config{
		Store:          st,
		Destinations:   dests,
		Tokens:         tokens,
		InsecureNoAuth: a.InsecureNoAuth,
		RedactPayloads: a.RedactPayloads,
		FailedBlocks:   policy == relay.BlockAggregate,
		CDC:            binlogCDCStatus(st, g.Table),
		Route: func(aggregateType, aggregateID, eventType string) string {
			return router.Route(&outbox.Message{AggregateType: aggregateType, AggregateID: aggregateID, EventType: eventType})
		},
		Logger: g.logger,
	})
}

// heartbeat keeps the relay's row in the heartbeat table fresh every
// interval, with the batches it has in flight, and removes it at the end.
// An interval of 0 or less turns it off.
func heartbeat(ctx context.Context, st store.Store, relayID string, interval time.Duration, inFlight func() int, log *slog.Logger) (stop func()) {
	if interval <= 0 {
		return func() {}
	}
	q := st.AdminQueries()
	host, _ := os.Hostname()
	beat := store.RelayHeartbeat{RelayID: relayID, Host: host, StartedAt: time.Now()}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		warned := false
		for {
			beat.InFlight = inFlight()
			if err := q.Heartbeat(ctx, beat); err != nil && ctx.Err() == nil && !warned {
				log.Warn("relay heartbeat failed (the admin API will not list this relay until it works)", "err", err)
				warned = true
			} else if err == nil {
				warned = false
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer rcancel()
		if err := q.RemoveRelay(rctx, relayID); err != nil {
			log.Debug("removing the relay's heartbeat row", "err", err)
		}
		_ = q.Close()
	}
}

// inFlightObserver counts the batches claimed and not yet recorded, for the
// heartbeat, and passes every call on to next (which may be nil).
type inFlightObserver struct {
	next relay.Observer
	mu   sync.Mutex
	n    int
}

func (o *inFlightObserver) inFlight() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

func (o *inFlightObserver) add(d int) {
	o.mu.Lock()
	o.n = max(o.n+d, 0)
	o.mu.Unlock()
}

func (o *inFlightObserver) ClaimDone(d time.Duration, events int, err error) {
	if err == nil && events > 0 {
		o.add(1)
	}
	if o.next != nil {
		o.next.ClaimDone(d, events, err)
	}
}

func (o *inFlightObserver) PublishDone(route string, d time.Duration, messages int) {
	if o.next != nil {
		o.next.PublishDone(route, d, messages)
	}
}

func (o *inFlightObserver) OutcomeRecorded(info relay.OutcomeInfo) {
	if o.next != nil {
		o.next.OutcomeRecorded(info)
	}
}

func (o *inFlightObserver) CompleteDone(d time.Duration, events int, err error) {
	if err == nil {
		o.add(-1)
	}
	if o.next != nil {
		o.next.CompleteDone(d, events, err)
	}
}

func (o *inFlightObserver) LeaseLost(events int) {
	if o.next != nil {
		o.next.LeaseLost(events)
	}
}

func (o *inFlightObserver) SweepDone(d time.Duration, res store.SweepResult, err error) {
	if o.next != nil {
		o.next.SweepDone(d, res, err)
	}
}

func (o *inFlightObserver) StoreError(op string, err error) {
	if o.next != nil {
		o.next.StoreError(op, err)
	}
}
