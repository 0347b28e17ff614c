// Package fanout delivers one outbox to the destinations of a
// destinations file (`outbox relay --config FILE`).
//
// The relay that reads the outbox table does not send events anywhere:
// its sink is a [Router], which copies each event into the outbox table
// of each destination its route names (the destination table, in the same
// database), with the store's CopyEvents. Each destination table is then
// delivered by a relay of its own, with the destination's sink. So every
// destination keeps a delivery state of its own for each event (status,
// retries, attempts, dead letter, breaker), one destination that is down
// holds nothing back at the others, and order per aggregate holds at each
// destination: the router copies an aggregate's events in their order,
// and a copy repeated after a crash adds nothing (a destination table
// holds an event id once).
package fanout

import (
	"context"
	"errors"
	"fmt"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/destconfig"
)

// Copier writes copies of outbox rows into a destination table: the
// store.Store method of that name.
type Copier interface {
	CopyEvents(ctx context.Context, from string, ids []int64) (int64, error)
}

// Destination is one destination of the file and its table's store.
type Destination struct {
	Name  string
	Table string
	Store Copier
}

// Router is the sink of the relay that reads the outbox table: it routes
// each event by the file's routes and copies it into each of its
// destinations' tables. An event no route matches fails for good
// ([outbox.Permanent]): the relay ends it FAILED with a reason that
// names it, and never drops it.
type Router struct {
	cfg   *destconfig.Config
	from  string
	dests map[string]Destination
	order []string // destination names in the file's order
}

// NewRouter returns the router of the outbox table from, given a store
// for every destination of cfg.
func NewRouter(cfg *destconfig.Config, from string, dests []Destination) (*Router, error) {
	r := &Router{cfg: cfg, from: from, dests: map[string]Destination{}}
	for _, d := range dests {
		r.dests[d.Name] = d
	}
	for _, d := range cfg.Destinations {
		if _, ok := r.dests[d.Name]; !ok {
			return nil, fmt.Errorf("%w: destination %s of %s has no table store", outbox.ErrInvalidConfig, d.Name, cfg.File)
		}
		r.order = append(r.order, d.Name)
	}
	return r, nil
}

// ErrNoRoute matches the error of an event that no route matches.
var ErrNoRoute = errors.New("no route matches the event")

// Publish copies msgs into their destinations' tables: one statement per
// destination, whatever the number of messages. It returns one result per
// message: nil once every destination of the message holds its copy.
// Once a message of an aggregate fails, the later ones of that aggregate
// in msgs are not routed (outbox.ErrNotAttempted); a copy a later
// message made already is harmless, since copying it again adds nothing.
func (r *Router) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	routes := make([][]string, len(msgs))
	stopped := map[string]bool{} // ordering keys with a message that cannot be routed
	byDest := map[string][]int64{}
	for i := range msgs {
		m := &msgs[i]
		key := m.OrderingKey()
		if stopped[key] {
			errs[i] = fmt.Errorf("%w: an earlier event of aggregate %s %s could not be routed", outbox.ErrNotAttempted, m.AggregateType, m.AggregateID)
			continue
		}
		to, ok := r.cfg.Resolve(m.EventType, m.AggregateType)
		if !ok {
			errs[i] = outbox.Permanent(fmt.Errorf("%w: %s has no route for event_type %q, aggregate_type %q: add a route for it "+
				"(or a last route with match: {}), restart the relays, then retry the event", ErrNoRoute, r.cfg.File, m.EventType, m.AggregateType))
			stopped[key] = true
			continue
		}
		routes[i] = to
		for _, d := range to {
			byDest[d] = append(byDest[d], m.ID)
		}
	}
	failed := map[string]error{}
	for _, name := range r.order {
		ids := byDest[name]
		if len(ids) == 0 {
			continue
		}
		d := r.dests[name]
		if _, err := d.Store.CopyEvents(ctx, r.from, ids); err != nil {
			failed[name] = fmt.Errorf("routing to destination %s (table %s): %w", name, d.Table, err)
		}
	}
	for i := range msgs {
		if errs[i] != nil {
			continue
		}
		key := msgs[i].OrderingKey()
		if stopped[key] {
			errs[i] = fmt.Errorf("%w: an earlier event of aggregate %s %s was not routed", outbox.ErrNotAttempted, msgs[i].AggregateType, msgs[i].AggregateID)
			continue
		}
		for _, name := range routes[i] {
			if err := failed[name]; err != nil {
				errs[i] = err
				stopped[key] = true
				break
			}
		}
	}
	return errs
}

// Close does nothing: the destination stores belong to the caller.
func (r *Router) Close(context.Context) error { return nil }
