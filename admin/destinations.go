package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// Destination is one destination of a fan-out (`outbox relay --config`)
// on the Destinations page: its own outbox table and the store on it,
// whose route breakers, backlog and deliveries the page shows.
type Destination struct {
	// Name is the destination's name in the destinations file.
	Name string
	// Table is the destination's outbox table, for display.
	Table string
	// URL is the destination's sink URL for display, with its secrets
	// already masked (redact.URL): the handler shows it as given.
	URL string
	// Store is the store on Table.
	Store store.Store
}

// destination is a Destination with the queries the handler opened on it.
type destination struct {
	Destination
	q   store.AdminQueries
	own bool // q was opened for it (and is closed by Handler.Close)
}

// recentWindow is the window of the deliveries per minute.
const recentWindow = 5 * time.Minute

// p99Limit bounds the publish times the p99 is computed over: the newest
// of the window.
const p99Limit = 10_000

// p99NoDelivery says why p99_publish_ms is null: no sink call finished in
// the window.
const p99NoDelivery = "no delivery in the last 5 minutes"

// newDestinations checks cfg.Destinations and opens their queries; with
// none, the handler's own store is the one destination.
func newDestinations(cfg Config, q store.AdminQueries) ([]*destination, error) {
	if len(cfg.Destinations) == 0 {
		name := "sink"
		if t, ok := cfg.Store.(interface{ Table() string }); ok && t.Table() != "" {
			name = t.Table()
		}
		table := ""
		if name != "sink" {
			table = name
		}
		return []*destination{{Destination: Destination{Name: name, Table: table, Store: cfg.Store}, q: q}}, nil
	}
	seen := map[string]bool{}
	var out []*destination
	for i, d := range cfg.Destinations {
		switch {
		case strings.TrimSpace(d.Name) == "" || strings.ContainsAny(d.Name, "/?#"):
			return nil, fmt.Errorf("%w: admin.Config.Destinations[%d] has no name or one with '/', '?' or '#': give each destination its name in the destinations file", outbox.ErrInvalidConfig, i)
		case seen[d.Name]:
			return nil, fmt.Errorf("%w: admin.Config.Destinations names %q twice: each destination once", outbox.ErrInvalidConfig, d.Name)
		case d.Store == nil:
			return nil, fmt.Errorf("%w: destination %q has no Store: open one on its table %s", outbox.ErrInvalidConfig, d.Name, d.Table)
		}
		seen[d.Name] = true
		out = append(out, &destination{Destination: d, q: d.Store.AdminQueries(), own: true})
	}
	return out, nil
}

// closeDestinations releases the queries opened for the destinations.
func closeDestinations(ds []*destination) error {
	var errs []error
	for _, d := range ds {
		if d.own {
			errs = append(errs, d.q.Close())
		}
	}
	return errors.Join(errs...)
}

// destinationJSON is one destination in GET /api/v1/destinations.
type destinationJSON struct {
	Name   string    `json:"name"`
	Table  string    `json:"table"`
	URL    string    `json:"url"`
	DBTime time.Time `json:"db_time"`
	// Routes are the routes whose breaker ever moved; any other is CLOSED.
	Routes []routeJSON `json:"routes"`
	// OpenRoutes counts the routes that are OPEN or HALF_OPEN.
	OpenRoutes int `json:"open_routes"`
	// Backlog counts PENDING events, InFlight PROCESSING (claimed) ones,
	// Failed FAILED ones, of the destination's table.
	Backlog             int64   `json:"backlog"`
	InFlight            int64   `json:"in_flight"`
	Failed              int64   `json:"failed"`
	OldestDueAgeSeconds float64 `json:"oldest_due_age_seconds"`
	// Recent counts the attempts that finished in the last 5 minutes;
	// DeliveredPerMinute is its deliveries divided by 5.
	Recent             recentJSON `json:"last_5m"`
	DeliveredPerMinute float64    `json:"delivered_per_minute"`
	// P99PublishMS is the 99th percentile (nearest rank) of the publish
	// times, per event, of the sink calls that finished in the last 5
	// minutes (store.AdminQueries.PublishDurations; the newest p99Limit of
	// them), in milliseconds; null when there was none, P99PublishNote then
	// saying so. The note also says when the limit cut the window.
	P99PublishMS   *float64 `json:"p99_publish_ms"`
	P99PublishNote string   `json:"p99_publish_note,omitempty"`
	// Error is set, and the figures are empty, when they could not be read.
	Error string `json:"error,omitempty"`
}

type recentJSON struct {
	Delivered int64 `json:"delivered"`
	Retried   int64 `json:"retried"`
	Failed    int64 `json:"failed"`
}

// routeJSON is one route's circuit breaker.
type routeJSON struct {
	Route     string             `json:"route"`
	State     store.BreakerState `json:"state"`
	OpenSince *time.Time         `json:"open_since,omitempty"`
	// NextProbe is when a probe may go (OPEN and not forced) or when the
	// probe's lease ends (HALF_OPEN, ProbeBy holding it).
	NextProbe *time.Time `json:"next_probe,omitempty"`
	ProbeBy   string     `json:"probe_by,omitempty"`
	LastError string     `json:"last_error,omitempty"`
	Opens     int        `json:"opens"`
	// Forced: an operator set the state by hand; a forced OPEN route is
	// never probed and stays open until an operator closes it.
	Forced    bool      `json:"forced"`
	UpdatedAt time.Time `json:"updated_at"`
}

// readDestination reads one destination's figures; a failed read is
// logged and reported in the destination's Error.
func (h *Handler) readDestination(ctx context.Context, d *destination) destinationJSON {
	out := destinationJSON{Name: d.Name, Table: d.Table, URL: d.URL, Routes: []routeJSON{}}
	err := func() error {
		snap, err := d.Store.Snapshot(ctx, store.SnapshotRequest{})
		if err != nil {
			return err
		}
		out.DBTime, out.OldestDueAgeSeconds = snap.DBTime, snap.OldestDuePendingAge.Seconds()
		out.Backlog, out.InFlight, out.Failed = snap.Counts[outbox.StatusPending], snap.Counts[outbox.StatusProcessing], snap.Counts[outbox.StatusFailed]
		rs, err := d.Store.Routes(ctx)
		if err != nil {
			return err
		}
		for _, r := range rs.Routes {
			rj := routeJSON{Route: r.Name, State: r.State, OpenSince: optTime(r.OpenedAt), LastError: r.LastError,
				Opens: r.Opens, Forced: r.Forced, UpdatedAt: r.UpdatedAt}
			switch {
			case r.State == store.BreakerHalfOpen:
				rj.NextProbe, rj.ProbeBy = optTime(r.ProbeAt), r.ProbeBy
			case r.State == store.BreakerOpen && !r.Forced:
				rj.NextProbe = optTime(r.ProbeAt)
			}
			if r.State != store.BreakerClosed {
				out.OpenRoutes++
			}
			out.Routes = append(out.Routes, rj)
		}
		buckets, err := d.q.Throughput(ctx, recentWindow)
		if err != nil {
			return err
		}
		for _, b := range buckets {
			switch b.Outcome {
			case store.Delivered:
				out.Recent.Delivered += b.Count
			case store.Retry:
				out.Recent.Retried += b.Count
			case store.Failed:
				out.Recent.Failed += b.Count
			}
		}
		out.DeliveredPerMinute = float64(out.Recent.Delivered) / recentWindow.Minutes()
		durations, err := d.q.PublishDurations(ctx, recentWindow, p99Limit)
		if err != nil {
			return err
		}
		out.P99PublishMS, out.P99PublishNote = p99(durations)
		return nil
	}()
	if err != nil {
		h.log.Error("admin: reading a destination", "destination", d.Name, "table", d.Table, "err", err)
		out.Error = "its figures could not be read: see the server log"
	}
	return out
}

// p99 is the 99th percentile of ds by nearest rank (the smallest value
// at least 99% of ds are at most), in milliseconds, with a note: why it is
// null (ds is empty), or that it covers the newest p99Limit publishes only.
func p99(ds []time.Duration) (*float64, string) {
	if len(ds) == 0 {
		return nil, p99NoDelivery
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	rank := (99*len(sorted) + 99) / 100 // ceil(0.99 n)
	ms := float64(sorted[rank-1].Microseconds()) / 1000
	note := ""
	if len(ds) >= p99Limit {
		note = fmt.Sprintf("over the newest %d publishes of the last 5 minutes", p99Limit)
	}
	return &ms, note
}

// P99Text is the p99 publish time as the page shows it.
func (d destinationJSON) P99Text() string {
	if d.P99PublishMS == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*d.P99PublishMS, 'f', 1, 64) + " ms"
}

func (h *Handler) destinationList(ctx context.Context) []destinationJSON {
	out := make([]destinationJSON, 0, len(h.dests))
	for _, d := range h.dests {
		out = append(out, h.readDestination(ctx, d))
	}
	return out
}

func (h *Handler) listDestinations(w http.ResponseWriter, r *http.Request, _ Identity) error {
	if len(r.URL.Query()) > 0 {
		return badRequest("destinations takes no parameters")
	}
	writeJSON(w, http.StatusOK, map[string]any{"destinations": h.destinationList(r.Context())})
	return nil
}

// routeActionJSON is the answer of opening or closing a route by hand.
type routeActionJSON struct {
	Action      string             `json:"action"`
	DryRun      bool               `json:"dry_run"`
	Actor       string             `json:"actor"`
	Destination string             `json:"destination"`
	Route       string             `json:"route"`
	Reason      string             `json:"reason"`
	From        store.BreakerState `json:"from"`
	To          store.BreakerState `json:"to"`
	Summary     string             `json:"summary"`
}

// routeActionParams are the parameters of opening and closing a route.
var routeActionParams = []string{"route", "reason", "dry_run"}

func (h *Handler) destinationNamed(name string) (*destination, error) {
	for _, d := range h.dests {
		if d.Name == name {
			return d, nil
		}
	}
	names := make([]string, len(h.dests))
	for i, d := range h.dests {
		names[i] = d.Name
	}
	return nil, &apiError{http.StatusNotFound, fmt.Sprintf("no destination %q: the destinations are %s", name, strings.Join(names, ", "))}
}

// routeAction opens (action "open") or closes ("close") a route of a
// destination by hand, as `outbox routes open|close` does: the change and
// its audit row name the operator and the reason.
func (h *Handler) routeAction(ctx context.Context, who Identity, destName, action, route, reason string, dryRun bool) (routeActionJSON, error) {
	res := routeActionJSON{Action: action, DryRun: dryRun, Actor: who.Name, Destination: destName}
	d, err := h.destinationNamed(destName)
	if err != nil {
		return res, err
	}
	c := store.RouteChange{Actor: "operator:" + who.Name}
	switch action {
	case "open":
		c.To, c.Forced = store.BreakerOpen, true
	case "close":
		c.To = store.BreakerClosed
	default:
		return res, &apiError{http.StatusNotFound, fmt.Sprintf("unknown action %q: open or close", action)}
	}
	res.Route, res.Reason, res.To = strings.TrimSpace(route), strings.TrimSpace(reason), c.To
	switch {
	case res.Route == "":
		return res, badRequest("route is required: name it as the Destinations page lists it (e.g. payment.events)")
	case res.Reason == "":
		return res, badRequest("reason is required: say why, for the audit trail")
	case len(res.Reason) > 500:
		return res, badRequest("reason: longer than 500 characters")
	}
	c.Route, c.Reason = res.Route, res.Reason
	if err := c.Validate(); err != nil {
		return res, err
	}
	if dryRun {
		snap, err := d.Store.Routes(ctx)
		if err != nil {
			return res, err
		}
		res.From = store.BreakerClosed
		for _, r := range snap.Routes {
			if r.Name == res.Route {
				res.From = r.State
			}
		}
	} else {
		from, err := store.ChangeRouteByHand(ctx, d.Store, c)
		if errors.Is(err, store.ErrRouteBusy) {
			return res, &apiError{http.StatusConflict, err.Error()}
		}
		if err != nil {
			return res, err
		}
		res.From = from
		h.log.Info("admin route action", "action", action, "actor", who.Name, "destination", d.Name, "route", res.Route,
			"from", string(from), "reason", res.Reason)
	}
	verb := map[string]string{"open": "opened", "close": "closed"}[action]
	if dryRun {
		verb = "would " + action
	}
	res.Summary = fmt.Sprintf("%s route %s of destination %s (it was %s)", verb, res.Route, d.Name, res.From)
	if action == "open" {
		res.Summary += ": its events wait until an operator closes it"
	}
	return res, nil
}

func (h *Handler) openRoute(w http.ResponseWriter, r *http.Request, who Identity) error {
	return h.routeActionAPI(w, r, who, "open")
}

func (h *Handler) closeRoute(w http.ResponseWriter, r *http.Request, who Identity) error {
	return h.routeActionAPI(w, r, who, "close")
}

func (h *Handler) routeActionAPI(w http.ResponseWriter, r *http.Request, who Identity, action string) error {
	v := r.URL.Query()
	for k := range v {
		if !slices.Contains(routeActionParams, k) {
			return badRequest("unknown parameter %q: %s takes %s", k, action, strings.Join(routeActionParams, ", "))
		}
	}
	dry := false
	if s := v.Get("dry_run"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return badRequest("dry_run: %q is not true or false", s)
		}
		dry = b
	}
	res, err := h.routeAction(r.Context(), who, r.PathValue("destination"), action, v.Get("route"), v.Get("reason"), dry)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// destinationsPage lists the destinations and their routes.
func (h *Handler) destinationsPage(_ http.ResponseWriter, r *http.Request, v *view) (string, error) {
	v.Title, v.Nav, v.Refresh = "Destinations", "destinations", true
	v.Flash = r.URL.Query().Get("done")
	v.Data = map[string]any{"Destinations": h.destinationList(r.Context()), "Operator": v.Who.Role.allows(Operator)}
	return "destinations", nil
}

// routeActionPage applies the open or close form of the page and goes
// back to it.
func (h *Handler) routeActionPage(w http.ResponseWriter, r *http.Request, v *view) (string, error) {
	res, err := h.routeAction(r.Context(), v.Who, r.PathValue("destination"), r.PathValue("action"),
		r.PostFormValue("route"), r.PostFormValue("reason"), false)
	if err != nil {
		return "", err
	}
	http.Redirect(w, r, "/destinations?done="+url.QueryEscape(res.Summary), http.StatusSeeOther)
	return "", nil
}
