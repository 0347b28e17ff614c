package admin

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

//go:embed templates/*.html
var templatesFS embed.FS

//go:embed static
var staticFS embed.FS

type ui struct {
	pages  map[string]*template.Template
	static http.Handler
}

var pageNames = []string{"login", "overview", "events", "event", "confirm", "dead_letters", "failure_groups", "blocked", "relays", "destinations", "error"}

func newUI() (*ui, error) {
	funcs := template.FuncMap{
		"age":    age,
		"time":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") },
		"iso":    func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"pretty": prettyJSON,
		"lower":  strings.ToLower,
		"bulkURL": func(action string, v url.Values) template.URL {
			q := url.Values{}
			for k, vals := range v {
				if k != "cursor" && k != "limit" {
					q[k] = vals
				}
			}
			return template.URL("/events/bulk/" + action + "?" + q.Encode())
		},
		"seconds":  func(f float64) string { return age(time.Now().Add(-time.Duration(f * float64(time.Second)))) },
		"percent":  func(f float64) string { return fmt.Sprintf("%.1f%%", f*100) },
		"statuses": func() []outbox.Status { return outbox.Statuses },
	}
	u := &ui{pages: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templatesFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("admin: template %s: %w", name, err)
		}
		u.pages[name] = t
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	u.static = http.StripPrefix("/static/", http.FileServerFS(sub))
	return u, nil
}

// age renders how long ago t was, e.g. "3m12s".
func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	if neg {
		return "in " + s
	}
	return s
}

func prettyJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// view is what every page template gets.
type view struct {
	Title   string
	Nav     string
	Who     Identity
	CSRF    string
	Refresh bool
	Flash   string
	Data    any
}

// page wraps a dashboard page: a request without a session goes to the
// login form; a POST needs the session's CSRF token and, for actions, the
// operator role.
func (h *Handler) page(needs Role, f func(w http.ResponseWriter, r *http.Request, v *view) (string, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := h.authenticate(r)
		if !a.ok {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			h.renderError(w, &view{}, &apiError{http.StatusUnauthorized, "your session has ended: log in again"})
			return
		}
		v := &view{Who: a.id}
		if a.session != nil {
			v.CSRF = a.session.csrf
		}
		if r.Method == http.MethodPost {
			if !csrfOK(r, a.session) {
				h.renderError(w, v, &apiError{http.StatusForbidden, "missing or wrong CSRF token: reload the page and try again"})
				return
			}
		}
		if !a.id.Role.allows(needs) {
			h.renderError(w, v, &apiError{http.StatusForbidden, fmt.Sprintf("refused: %s is a viewer, and this action needs the operator role", a.id.Name)})
			return
		}
		name, err := f(w, r.WithContext(withIdentity(r.Context(), a.id)), v)
		if err != nil {
			h.renderError(w, v, h.asAPIError(r, err))
			return
		}
		if name != "" {
			h.render(w, http.StatusOK, name, v)
		}
	})
}

func (h *Handler) asAPIError(r *http.Request, err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, outbox.ErrNotFound):
		return &apiError{http.StatusNotFound, err.Error()}
	case errors.Is(err, outbox.ErrConflict):
		return &apiError{http.StatusConflict, err.Error()}
	case errors.Is(err, outbox.ErrInvalidConfig):
		return &apiError{http.StatusBadRequest, err.Error()}
	}
	h.log.Error("admin page failed", "path", r.URL.Path, "err", err)
	return &apiError{http.StatusInternalServerError, "internal error: see the server log"}
}

func (h *Handler) renderError(w http.ResponseWriter, v *view, e *apiError) {
	v.Title, v.Data = http.StatusText(e.status), e
	h.render(w, e.status, "error", v)
}

func (h *Handler) render(w http.ResponseWriter, status int, name string, v *view) {
	var b bytes.Buffer
	if err := h.ui.pages[name].Execute(&b, v); err != nil {
		h.log.Error("admin: render", "page", name, "err", err)
		http.Error(w, "internal error: see the server log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	w.Header().Set("X-Frame-Options", "DENY")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func (h *Handler) mountUI() {
	h.mux.Handle("GET /static/", h.ui.static)
	h.mux.HandleFunc("GET /login", h.loginForm)
	h.mux.HandleFunc("POST /login", h.login)
	h.mux.HandleFunc("POST /logout", h.logout)
	h.mux.Handle("GET /{$}", h.page(Viewer, h.overviewPage))
	h.mux.Handle("GET /events", h.page(Viewer, h.eventsPage))
	h.mux.Handle("GET /events/{event_id}", h.page(Viewer, h.eventPage))
	h.mux.Handle("POST /events/{event_id}/{action}", h.page(Operator, h.eventActionPage))
	h.mux.Handle("POST /events/bulk/{action}", h.page(Operator, h.bulkActionPage))
	h.mux.Handle("GET /dead-letters", h.page(Viewer, h.deadLettersPage))
	h.mux.Handle("GET /failure-groups", h.page(Viewer, h.failureGroupsPage))
	h.mux.Handle("GET /blocked", h.page(Viewer, h.blockedPage))
	h.mux.Handle("GET /relays", h.page(Viewer, h.relaysPage))
	h.mux.Handle("GET /destinations", h.page(Viewer, h.destinationsPage))
	h.mux.Handle("POST /destinations/{destination}/{action}", h.page(Operator, h.routeActionPage))
}

// safeNext keeps a login redirect on this site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	return next
}

func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	h.render(w, http.StatusOK, "login", &view{Title: "Log in", Data: map[string]string{"Next": safeNext(r.URL.Query().Get("next"))}})
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	next := safeNext(r.PostFormValue("next"))
	id, ok := h.auth.check(strings.TrimSpace(r.PostFormValue("token")))
	if !ok {
		h.render(w, http.StatusUnauthorized, "login", &view{Title: "Log in", Flash: "That token is not valid.", Data: map[string]string{"Next": next}})
		return
	}
	key, _ := h.sessions.create(id)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: key, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: int(h.cfg.SessionTTL.Seconds())})
	h.log.Info("admin login", "name", id.Name, "role", string(id.Role))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		if s, ok := h.sessions.get(c.Value); ok && csrfOK(r, &s) {
			h.sessions.remove(c.Value)
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// bar is one bar of a server-drawn SVG chart.
type bar struct {
	X, Y, W, H float64
	Label      string
}

// chart draws values (oldest first) as bars in a 600x120 box.
func chart(values []float64, label func(i int, v float64) string) []bar {
	top := 0.0
	for _, v := range values {
		top = math.Max(top, v)
	}
	w := 600.0 / float64(len(values))
	out := make([]bar, len(values))
	for i, v := range values {
		hgt := 0.0
		if top > 0 {
			hgt = v / top * 110
		}
		out[i] = bar{X: float64(i) * w, Y: 120 - hgt, W: math.Max(w-1, 1), H: hgt, Label: label(i, v)}
	}
	return out
}

type overviewData struct {
	Stats      statsJSON
	Relays     []relayJSON
	Throughput []bar
	Failures   []bar
	Statuses   []statusCount
}

type statusCount struct {
	Status outbox.Status
	Count  int64
}

func (h *Handler) overviewPage(_ http.ResponseWriter, r *http.Request, v *view) (string, error) {
	s, err := h.stats(r.Context())
	if err != nil {
		return "", err
	}
	relays, err := h.relayList(r.Context())
	if err != nil {
		return "", err
	}
	d := overviewData{Stats: s, Relays: relays}
	for _, st := range store.UnfinishedStatuses {
		d.Statuses = append(d.Statuses, statusCount{st, s.Counts[st]})
	}
	// The last 60 minutes, one bar each, ending at the database's minute.
	end := s.DBTime.UTC().Truncate(time.Minute)
	delivered, rate := make([]float64, 60), make([]float64, 60)
	failed := make([]float64, 60)
	for _, m := range s.Throughput {
		i := 59 - int(end.Sub(m.Minute.UTC())/time.Minute)
		if i >= 0 && i < 60 {
			delivered[i], failed[i] = float64(m.Delivered), float64(m.Failed)
			if n := m.Delivered + m.Failed; n > 0 {
				rate[i] = float64(m.Failed) / float64(n)
			}
		}
	}
	minute := func(i int) string { return end.Add(time.Duration(i-59) * time.Minute).Format("15:04") }
	d.Throughput = chart(delivered, func(i int, x float64) string { return fmt.Sprintf("%s: %.0f delivered", minute(i), x) })
	d.Failures = chart(rate, func(i int, x float64) string {
		return fmt.Sprintf("%s: %.1f%% failed (%.0f)", minute(i), x*100, failed[i])
	})
	v.Title, v.Nav, v.Refresh, v.Data = "Overview", "overview", true, d
	return "overview", nil
}

type eventsData struct {
	Filter url.Values
	Events []eventJSON
	Next   template.URL
}

func (h *Handler) eventsPage(_ http.ResponseWriter, r *http.Request, v *view) (string, error) {
	q := r.URL.Query()
	for k, vals := range q { // empty form fields are no filter
		if len(vals) == 1 && vals[0] == "" {
			q.Del(k)
		}
	}
	f, err := parseFilter(q, "cursor", "limit")
	if err != nil {
		return "", err
	}
	limit, err := parseLimit(q, 50, store.MaxQueryLimit)
	if err != nil {
		return "", err
	}
	if c := q.Get("cursor"); c != "" {
		if f.BeforeID, err = decodeCursor(c); err != nil {
			return "", err
		}
	}
	recs, next, err := h.queryPage(r, f, limit)
	if err != nil {
		return "", err
	}
	d := eventsData{Filter: q, Events: make([]eventJSON, len(recs))}
	for i, rec := range recs {
		d.Events[i] = h.eventJSON(rec)
	}
	if next != "" {
		nq := url.Values{}
		for k, vals := range q {
			nq[k] = vals
		}
		nq.Set("cursor", next)
		d.Next = template.URL("/events?" + nq.Encode())
	}
	q.Del("cursor")
	v.Title, v.Nav, v.Refresh, v.Data = "Events", "events", true, d
	return "events", nil
}

func (h *Handler) eventPage(_ http.ResponseWriter, r *http.Request, v *view) (string, error) {
	id, err := parseEventID(r)
	if err != nil {
		return "", err
	}
	d, err := h.detail(r, id, v.Who)
	if err != nil {
		return "", err
	}
	v.Title, v.Nav, v.Data = "Event "+id.String(), "events", d
	v.Flash = r.URL.Query().Get("done")
	return "event", nil
}

type confirmData struct {
	Action string
	Result actionResult
	// Replay is the dry run of a replay (Action "replay"), instead of
	// Result.
	Replay *replayResult
	Target template.URL // where the confirmed form posts
	Back   template.URL
	Reason string
	// Destination is the destination whose copy of the event the action
	// changes ("": the outbox's row).
	Destination string
}

func changeFor(action string) (store.OperatorChange, error) {
	switch action {
	case "retry":
		return store.RequeueChange, nil
	case "skip":
		return store.SkipChange, nil
	}
	return store.OperatorChange{}, &apiError{http.StatusNotFound, fmt.Sprintf("unknown action %q: retry, skip or replay", action)}
}

// eventActionPage runs the dry run of an action on one event and asks to
// confirm it, or, with confirm=yes, applies it.
func (h *Handler) eventActionPage(w http.ResponseWriter, r *http.Request, v *view) (string, error) {
	if r.PathValue("action") == "replay" {
		return h.replayEventPage(w, r, v)
	}
	id, err := parseEventID(r)
	if err != nil {
		return "", err
	}
	c, err := changeFor(r.PathValue("action"))
	if err != nil {
		return "", err
	}
	p := actionParams{dryRun: r.PostFormValue("confirm") != "yes", reason: r.PostFormValue("reason"), destination: r.PostFormValue("destination")}
	if len(p.reason) > 500 {
		return "", badRequest("reason: longer than 500 characters")
	}
	res, err := h.actOneCore(r.Context(), v.Who, c, id, p)
	if err != nil {
		return "", err
	}
	if !p.dryRun {
		http.Redirect(w, r, "/events/"+id.String()+"?done="+url.QueryEscape(res.Summary), http.StatusSeeOther)
		return "", nil
	}
	v.Title, v.Nav = "Confirm "+res.Action, "events"
	v.Data = confirmData{Action: res.Action, Result: res, Target: template.URL(r.URL.Path), Back: template.URL("/events/" + id.String()), Reason: p.reason,
		Destination: p.destination}
	return "confirm", nil
}

// bulkActionPage is eventActionPage for every event of the filter in the
// query string.
func (h *Handler) bulkActionPage(w http.ResponseWriter, r *http.Request, v *view) (string, error) {
	c, err := changeFor(r.PathValue("action"))
	if err != nil {
		return "", err
	}
	q := r.URL.Query()
	f, err := parseFilter(q)
	if err != nil {
		return "", err
	}
	p := actionParams{dryRun: r.PostFormValue("confirm") != "yes", reason: r.PostFormValue("reason")}
	if err := bulkStatuses(c, &f); err != nil {
		return "", err
	}
	var res actionResult
	if p.dryRun {
		if res, err = h.actMatchingCore(r.Context(), v.Who, c, f, p, nil); err != nil {
			return "", err
		}
		v.Title = "Confirm " + res.Action
	} else {
		j := h.startBulk(v.Who, c, f, p)
		finished := h.waitBulk(r.Context(), j)
		snap := j.snapshot()
		res = snap.Result
		switch {
		case !finished:
			v.Title = "Running"
			v.Flash = fmt.Sprintf("Still running in the background as job %s (GET %s reports its progress): %s so far", j.id, snap.URL, res.Summary)
		case res.Error != "":
			v.Title, v.Flash = "Stopped", res.Summary+": "+res.Error
		default:
			v.Title, v.Flash = "Done", res.Summary
		}
	}
	v.Nav = "events"
	v.Data = confirmData{Action: res.Action, Result: res, Target: template.URL(r.URL.RequestURI()), Back: template.URL("/events?" + q.Encode()), Reason: p.reason}
	return "confirm", nil
}

func (h *Handler) deadLettersPage(_ http.ResponseWriter, r *http.Request, v *view) (string, error) {
	dls, err := h.st.DeadLetters(r.Context(), 200)
	if err != nil {
		return "", err
	}
	v.Title, v.Nav, v.Refresh, v.Data = "Dead letters", "dead-letters", true, dls
	return "dead_letters", nil
}

func (h *Handler) failureGroupsPage(_ http.ResponseWriter, r *http.Request, v *view) (string, error) {
	groups, truncated, err := h.failureGroupsOf(r.Context())
	if err != nil {
		return "", err
	}
	v.Title, v.Nav, v.Refresh = "Failure groups", "failure-groups", true
	v.Data = map[string]any{"Groups": groups, "Truncated": truncated}
	return "failure_groups", nil
}

func (h *Handler) blockedPage(_ http.ResponseWriter, r *http.Request, v *view) (string, error) {
	chains, err := h.chains(r.Context(), 50)
	if err != nil {
		return "", err
	}
	v.Title, v.Nav, v.Refresh, v.Data = "Blocked aggregates", "blocked", true, chains
	return "blocked", nil
}

// RouteState is one route's row on the relays page: its circuit breaker
// as the relays share it through the store (Config.RouteStates; by default
// read from Store.Routes).
type RouteState struct {
	Route   string
	Breaker string // CLOSED, OPEN or HALF_OPEN
	// Since is when the current outage began (zero when CLOSED); Forced
	// says an operator set the state by hand; LastError is the last
	// destination fault seen when it opened.
	Since     time.Time
	Forced    bool
	LastError string
}

// routeStatesOf reads the routes' breakers from rs, for the relays page.
func routeStatesOf(rs store.Store) func(ctx context.Context) ([]RouteState, error) {
	return func(ctx context.Context) ([]RouteState, error) {
		snap, err := rs.Routes(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]RouteState, 0, len(snap.Routes))
		for _, r := range snap.Routes {
			out = append(out, RouteState{Route: r.Name, Breaker: string(r.State), Since: r.OpenedAt, Forced: r.Forced, LastError: r.LastError})
		}
		return out, nil
	}
}

func (h *Handler) relaysPage(_ http.ResponseWriter, r *http.Request, v *view) (string, error) {
	relays, err := h.relayList(r.Context())
	if err != nil {
		return "", err
	}
	var routes []RouteState
	if h.cfg.RouteStates != nil {
		if routes, err = h.cfg.RouteStates(r.Context()); err != nil {
			return "", err
		}
	}
	v.Title, v.Nav, v.Refresh = "Relays and routes", "relays", true
	v.Data = map[string]any{"Relays": relays, "Routes": routes}
	return "relays", nil
}
