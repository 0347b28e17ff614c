package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txoutbox/outbox"
)

// BreakerState is the state of a route's circuit breaker.
type BreakerState string

// The states of a breaker.
const (
	// BreakerClosed: events of the route are sent.
	BreakerClosed BreakerState = "CLOSED"
	// BreakerOpen: events of the route are not sent; they wait, PENDING,
	// without a retry counted, until a probe may go (Route.ProbeAt).
	BreakerOpen BreakerState = "OPEN"
	// BreakerHalfOpen: one relay sends one probe event (Route.ProbeBy);
	// the others keep waiting.
	BreakerHalfOpen BreakerState = "HALF_OPEN"
)

// ParseBreakerState accepts CLOSED, OPEN or HALF_OPEN.
func ParseBreakerState(s string) (BreakerState, error) {
	switch st := BreakerState(s); st {
	case BreakerClosed, BreakerOpen, BreakerHalfOpen:
		return st, nil
	}
	return "", fmt.Errorf("%w: unknown breaker state %q: use CLOSED, OPEN or HALF_OPEN", outbox.ErrInvalidConfig, s)
}

// MaxRouteLen is the longest route name the route tables hold; the relay
// shortens longer ones (keeping them unique) before they reach the store.
const MaxRouteLen = 400

// MaxRouteTextRunes bounds the reason and error texts of route rows.
const MaxRouteTextRunes = 1000

// Route is one row of the route table.
type Route struct {
	Name  string
	State BreakerState
	// Version grows by one with every change; ChangeRoute compares it.
	Version int64
	// OpenedAt is when the current outage began (OPEN, HALF_OPEN); zero
	// when CLOSED.
	OpenedAt time.Time
	// ProbeAt is, when OPEN, the earliest time a probe may go; when
	// HALF_OPEN, the end of the probe's lease, after which another relay
	// may take the probe over.
	ProbeAt time.Time
	// ProbeBy is the relay that holds the probe (HALF_OPEN).
	ProbeBy string
	// Opens counts the times the route's breaker opened (from CLOSED,
	// by a relay or by hand) since its row was made; closing it keeps
	// the count. A failed probe is no new opening.
	Opens int
	// Forced: an operator set the state by hand. A forced OPEN route is
	// never probed; it stays open until an operator closes it.
	Forced bool
	// LastError is the last destination fault seen when it opened.
	LastError string
	// UpdatedAt is when the row last changed.
	UpdatedAt time.Time
}

// RouteSnapshot is every route row at one instant of the database clock.
type RouteSnapshot struct {
	DBTime time.Time
	Routes []Route
}

// RouteChange is one transition of a route's breaker.
type RouteChange struct {
	Route string
	// Version is the version the change was decided on (0: no row yet).
	Version int64
	To      BreakerState
	// ProbeIn sets ProbeAt to the database clock plus ProbeIn (OPEN,
	// HALF_OPEN).
	ProbeIn time.Duration
	// ProbeBy names the relay taking the probe (HALF_OPEN).
	ProbeBy string
	Opens   int
	Forced  bool
	// Actor (a relay id, or "operator:<name>") and Reason go in the
	// audit row, LastError in both rows.
	Actor     string
	Reason    string
	LastError string
}

// Validate checks c before it reaches SQL.
func (c RouteChange) Validate() error {
	switch {
	case c.Route == "":
		return fmt.Errorf("%w: route name is empty", outbox.ErrInvalidConfig)
	case len(c.Route) > MaxRouteLen:
		return fmt.Errorf("%w: route name is %d bytes long: at most %d", outbox.ErrInvalidConfig, len(c.Route), MaxRouteLen)
	case c.Version < 0:
		return fmt.Errorf("%w: route version %d is negative", outbox.ErrInvalidConfig, c.Version)
	case c.ProbeIn < 0:
		return fmt.Errorf("%w: probe delay %s is negative", outbox.ErrInvalidConfig, c.ProbeIn)
	case c.Actor == "":
		return fmt.Errorf("%w: a route change needs an actor for the audit row", outbox.ErrInvalidConfig)
	}
	if _, err := ParseBreakerState(string(c.To)); err != nil {
		return err
	}
	return nil
}

// RouteLogEntry is one audit row of a route's breaker.
type RouteLogEntry struct {
	At        time.Time
	Route     string
	Actor     string
	From, To  BreakerState
	Reason    string
	LastError string
}

// RouteTable and RouteLogTable name the breaker's tables of an outbox.
func (t Tables) RouteTable() string    { return t.Outbox + "_routes" }
func (t Tables) RouteLogTable() string { return t.Outbox + "_route_log" }

// ChangeRouteByHand applies an operator's change to a route's breaker:
// c.To is BreakerOpen (with c.Forced: the route stays open until an
// operator closes it) or BreakerClosed, c.Actor is "operator:<name>" and
// c.Reason says why; both go in the audit row. It reads the route's
// current version and applies c to it, again if a relay moved the route
// meanwhile. Opens grows by one when c opens a closed route; the last
// error is kept. It returns the state the route was in, or ErrRouteBusy.
func ChangeRouteByHand(ctx context.Context, s Store, c RouteChange) (BreakerState, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	for range 10 {
		snap, err := s.Routes(ctx)
		if err != nil {
			return "", err
		}
		c.Version, c.Opens = 0, 0
		from := BreakerClosed
		for _, r := range snap.Routes {
			if r.Name == c.Route {
				c.Version, c.LastError, c.Opens, from = r.Version, r.LastError, r.Opens, r.State
			}
		}
		if c.To == BreakerOpen && from == BreakerClosed {
			c.Opens++
		}
		ok, err := s.ChangeRoute(ctx, c)
		if err != nil {
			return "", err
		}
		if ok {
			return from, nil
		}
	}
	return "", fmt.Errorf("route %s: %w", c.Route, ErrRouteBusy)
}

// ErrRouteBusy: relays kept moving the route while an operator's change
// tried to apply; trying again later usually works.
var ErrRouteBusy = errors.New("the route kept changing under this change (relays moving it): try again")
