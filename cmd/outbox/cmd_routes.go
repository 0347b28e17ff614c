package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// RoutesCmd groups the commands on the routes' circuit breakers.
type RoutesCmd struct {
	List  RoutesListCmd  `cmd:"" help:"List every route whose breaker ever moved, and the latest audit rows."`
	Open  RoutesOpenCmd  `cmd:"" help:"Open a route's breaker by hand: its events wait until you close it (audited)."`
	Close RoutesCloseCmd `cmd:"" help:"Close a route's breaker by hand: its events flow again as they come due, within --breaker-open-max (audited)."`
}

// RoutesListCmd lists the breakers.
type RoutesListCmd struct {
	Log  int  `help:"Also print this many of the latest audit rows (0: none)." default:"10"`
	JSON bool `name:"json" help:"Print one JSON object: routes and log."`
}

// routeStore opens the backend and its route state.
func routeStore(ctx context.Context, g *Globals) (*backend, store.Store, error) {
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return nil, nil, err
	}
	return b, b.store, nil
}

// Run lists.
func (c *RoutesListCmd) Run(ctx context.Context, g *Globals) error {
	b, rs, err := routeStore(ctx, g)
	if err != nil {
		return err
	}
	defer b.close()
	snap, err := rs.Routes(ctx)
	if err != nil {
		return err
	}
	var log []store.RouteLogEntry
	if c.Log > 0 {
		if log, err = rs.RouteLog(ctx, "", min(c.Log, 10000)); err != nil {
			return err
		}
	}
	if c.JSON {
		return json.NewEncoder(g.stdout).Encode(map[string]any{"db_time": snap.DBTime, "routes": snap.Routes, "log": log})
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tSTATE\tOPEN SINCE\tNEXT PROBE\tOPENS\tBY HAND\tLAST ERROR")
	for _, r := range snap.Routes {
		next := ts(r.ProbeAt)
		switch {
		case r.State == store.BreakerClosed:
			next = "-"
		case r.State == store.BreakerOpen && r.Forced:
			next = "never (opened by hand)"
		case r.State == store.BreakerHalfOpen:
			next = "in flight (" + r.ProbeBy + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%v\t%s\n", r.Name, r.State, ts(r.OpenedAt), next, r.Opens, r.Forced, short(r.LastError, 60))
	}
	if len(snap.Routes) == 0 {
		fmt.Fprintln(tw, "(no route's breaker has moved: every route is CLOSED)")
	}
	if len(log) > 0 {
		fmt.Fprintln(tw, "\nWHEN\tROUTE\tFROM\tTO\tBY\tWHY")
		for _, e := range log {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ts(e.At), e.Route, e.From, e.To, e.Actor, short(e.Reason, 80))
		}
	}
	return tw.Flush()
}

// RoutesOpenCmd opens a breaker by hand.
type RoutesOpenCmd struct {
	Route  string `arg:"" help:"The route, as 'outbox routes list', the logs and the metrics name it (e.g. payment.events or https://gateway.example/approve)."`
	Actor  string `help:"Who is acting, for the audit trail (default: the OS user)."`
	Reason string `help:"Why, for the audit trail." default:"opened by hand"`
}

// Run opens.
func (c *RoutesOpenCmd) Run(ctx context.Context, g *Globals) error {
	return changeRouteByHand(ctx, g, c.Route, store.RouteChange{To: store.BreakerOpen, Forced: true,
		Actor: "operator:" + actorName(c.Actor), Reason: c.Reason}, "opened (its events wait until `outbox routes close`)")
}

// RoutesCloseCmd closes a breaker by hand.
type RoutesCloseCmd struct {
	Route  string `arg:"" help:"The route, as 'outbox routes list' names it."`
	Actor  string `help:"Who is acting, for the audit trail (default: the OS user)."`
	Reason string `help:"Why, for the audit trail." default:"closed by hand"`
}

// Run closes.
func (c *RoutesCloseCmd) Run(ctx context.Context, g *Globals) error {
	return changeRouteByHand(ctx, g, c.Route, store.RouteChange{To: store.BreakerClosed,
		Actor: "operator:" + actorName(c.Actor), Reason: c.Reason}, "closed")
}

// changeRouteByHand applies c to the route's current version, again if a
// relay moved the route meanwhile (store.ChangeRouteByHand).
func changeRouteByHand(ctx context.Context, g *Globals, route string, c store.RouteChange, done string) error {
	route = strings.TrimSpace(route)
	if route == "" {
		return fmt.Errorf("%w: the route is empty: name it as `outbox routes list` shows it", outbox.ErrInvalidConfig)
	}
	c.Route = route
	if err := c.Validate(); err != nil {
		return err
	}
	b, rs, err := routeStore(ctx, g)
	if err != nil {
		return err
	}
	defer b.close()
	if _, err := store.ChangeRouteByHand(ctx, rs, c); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "route %s %s\n", route, done)
	return nil
}
