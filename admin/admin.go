// Package admin is the outbox's admin surface: a JSON API under /api/v1/
// (described by docs/openapi.yaml) and a server-rendered dashboard, in one
// embeddable http.Handler:
//
//	h, err := admin.New(admin.Config{Store: st, Tokens: tokens})
//	mux.Handle("/", h)
//
// Every request is authenticated (bearer token or the dashboard's session
// cookie) unless Config.InsecureNoAuth. A viewer reads; an operator also
// acts (retry, skip, purge; open and close a route's breaker), and every
// action writes an audit row that names the operator (per event, or in
// the route log). Every action takes dry_run=true, which changes nothing
// and reports the blast radius.
//
// The root package and the relay do not import admin; `outbox admin` and
// `outbox relay --admin` mount it.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// Config configures the handler.
type Config struct {
	// Store is the outbox: its AdminQueries answer the API, its Snapshot
	// the overview.
	Store store.Store
	// Destinations are the destinations of a fan-out (`outbox relay
	// --config`), each with the store on its own table, for the
	// Destinations page and GET /api/v1/destinations. Empty: the page
	// shows one destination, Store itself, named after its table.
	Destinations []Destination
	// Tokens are the accepted bearer tokens (see ParseTokens).
	Tokens []Token
	// InsecureNoAuth serves everyone as an operator named "anonymous".
	// Only for a listener on a loopback address: the commands refuse it
	// elsewhere.
	InsecureNoAuth bool
	// RedactPayloads hides payloads and header values from viewers.
	RedactPayloads bool
	// FailedBlocks: the relays hold an aggregate behind its FAILED event
	// (the default policy of `outbox relay`).
	FailedBlocks bool
	// Route names the destination an event goes to, for the route filter
	// and the failure groups; nil means "{aggregate_type}.events".
	Route func(aggregateType, aggregateID, eventType string) string
	// RouteStates, when set, lists the routes and their breaker states on
	// the relays page; nil reads them from Store.Routes.
	RouteStates func(ctx context.Context) ([]RouteState, error)
	// CDC, when set, reads the status of the change-data-capture source
	// that feeds the relays (its stream, saved position, lease holder and
	// lag) for GET /api/v1/stats; it returns nil when there is none.
	CDC func(ctx context.Context) (*CDCStatus, error)
	// RelayWithin: a relay whose heartbeat is older is not listed as
	// alive. Default 30s.
	RelayWithin time.Duration
	// BulkPageSize is how many events a bulk action changes per page;
	// default 500.
	BulkPageSize int
	// BulkWait is how long a bulk retry or skip request waits for the
	// action: it answers 200 with the result if the action finished by
	// then, else 202 with a job whose progress GET /api/v1/jobs/{job_id}
	// reports. Default 5s; negative answers 202 at once.
	BulkWait time.Duration
	// SessionTTL bounds a dashboard session; default 12h.
	SessionTTL time.Duration
	// Logger receives the audit of actions; default slog.Default().
	Logger *slog.Logger
}

// Handler serves the admin API and the dashboard.
type Handler struct {
	cfg      Config
	st       store.Store
	q        store.AdminQueries
	auth     *authenticator
	mux      *http.ServeMux
	log      *slog.Logger
	ui       *ui
	sessions *sessions
	// throughput caches the overview's per-minute counts.
	throughput throughputCache
	// jobs are the bulk actions running in the background.
	jobs *jobs
	// dests are the destinations of the Destinations page.
	dests []*destination
}

// New checks cfg and returns the handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: admin.Config.Store is required", outbox.ErrInvalidConfig)
	}
	if len(cfg.Tokens) == 0 && !cfg.InsecureNoAuth {
		return nil, fmt.Errorf("%w: the admin handler needs tokens (--tokens-file or OUTBOX_ADMIN_TOKENS), or --insecure-no-auth on a loopback address", outbox.ErrInvalidConfig)
	}
	if err := checkTokens(cfg.Tokens); err != nil {
		return nil, err
	}
	if cfg.Route == nil {
		cfg.Route = func(aggregateType, _, _ string) string { return aggregateType + ".events" }
	}
	if cfg.RouteStates == nil {
		cfg.RouteStates = routeStatesOf(cfg.Store)
	}
	if cfg.RelayWithin <= 0 {
		cfg.RelayWithin = 30 * time.Second
	}
	if cfg.BulkPageSize <= 0 {
		cfg.BulkPageSize = 500
	}
	if cfg.BulkWait == 0 {
		cfg.BulkWait = 5 * time.Second
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Handler{cfg: cfg, st: cfg.Store, q: cfg.Store.AdminQueries(), log: cfg.Logger,
		mux: http.NewServeMux(), sessions: newSessions(cfg.SessionTTL), jobs: newJobs()}
	h.auth = newAuthenticator(cfg.Tokens, cfg.InsecureNoAuth)
	var err error
	if h.dests, err = newDestinations(cfg, h.q); err != nil {
		_ = h.q.Close()
		return nil, err
	}
	if h.ui, err = newUI(); err != nil {
		return nil, err
	}
	for _, r := range apiRoutes(h) {
		h.mux.Handle(r.Method+" "+r.Path, h.api(r.Role, r.Handle))
	}
	h.mountUI()
	return h, nil
}

// Close stops the bulk jobs still running (between two events: each
// change made is committed) and waits for them, then releases what New
// opened (a database/sql handle on a PostgreSQL pool); the store stays
// open.
func (h *Handler) Close() error {
	if h.jobs != nil {
		h.jobs.close()
	}
	return errors.Join(closeDestinations(h.dests), h.q.Close())
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	h.mux.ServeHTTP(w, r)
}

// route is one API route: what the OpenAPI document describes.
type route struct {
	Method, Path string
	Role         Role
	Handle       func(w http.ResponseWriter, r *http.Request, id Identity) error
}

// Routes lists the API's routes as "METHOD /path" (for the OpenAPI check).
func Routes() []string {
	var out []string
	for _, r := range apiRoutes(&Handler{}) {
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

func apiRoutes(h *Handler) []route {
	return []route{
		{"GET", "/api/v1/stats", Viewer, h.getStats},
		{"GET", "/api/v1/destinations", Viewer, h.listDestinations},
		{"POST", "/api/v1/destinations/{destination}/open", Operator, h.openRoute},
		{"POST", "/api/v1/destinations/{destination}/close", Operator, h.closeRoute},
		{"GET", "/api/v1/events", Viewer, h.listEvents},
		{"GET", "/api/v1/events/{event_id}", Viewer, h.getEvent},
		{"POST", "/api/v1/events/{event_id}/retry", Operator, h.retryOne},
		{"POST", "/api/v1/events/{event_id}/skip", Operator, h.skipOne},
		{"POST", "/api/v1/events/retry", Operator, h.retryMatching},
		{"POST", "/api/v1/events/skip", Operator, h.skipMatching},
		{"POST", "/api/v1/events/replay", Operator, h.replayMatching},
		{"GET", "/api/v1/jobs/{job_id}", Viewer, h.getJob},
		{"POST", "/api/v1/purge", Operator, h.purge},
		{"GET", "/api/v1/dead-letters", Viewer, h.listDeadLetters},
		{"GET", "/api/v1/failure-groups", Viewer, h.failureGroups},
		{"GET", "/api/v1/blocked", Viewer, h.blocked},
		{"GET", "/api/v1/relays", Viewer, h.relays},
		{"GET", "/api/v1/whoami", Viewer, h.whoami},
	}
}
