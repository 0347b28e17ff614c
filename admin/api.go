package admin

import (
	"encoding/base64"
	"encoding/json"
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

// apiError is an error with the HTTP status it answers with.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// Status is the HTTP status the error answers with.
func (e *apiError) Status() int { return e.status }

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// api wraps an API handler: authentication, the role check, CSRF for
// cookie sessions, and the error answer.
func (h *Handler) api(needs Role, f func(w http.ResponseWriter, r *http.Request, id Identity) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		a := h.authenticate(r)
		if !a.ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="outbox admin"`)
			writeError(w, &apiError{http.StatusUnauthorized, "authentication required: send Authorization: Bearer TOKEN"})
			return
		}
		if !a.id.Role.allows(needs) {
			writeError(w, &apiError{http.StatusForbidden, fmt.Sprintf("%s %s is a viewer: this needs the operator role", a.id.Role, a.id.Name)})
			return
		}
		if r.Method == http.MethodPost && !csrfOK(r, a.session) {
			writeError(w, &apiError{http.StatusForbidden, "missing or wrong CSRF token: reload the page"})
			return
		}
		if err := f(w, r.WithContext(withIdentity(r.Context(), a.id)), a.id); err != nil {
			h.writeErr(w, r, err)
		}
	})
}

// writeErr answers err: its own status for an apiError, 404, 409 and 400
// for the outbox's typed errors, and otherwise a 500 that says nothing
// about the database (the detail goes to the log).
func (h *Handler) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
	case errors.Is(err, outbox.ErrNotFound):
		ae = &apiError{http.StatusNotFound, err.Error()}
	case errors.Is(err, outbox.ErrConflict):
		ae = &apiError{http.StatusConflict, err.Error()}
	case errors.Is(err, outbox.ErrInvalidConfig):
		ae = &apiError{http.StatusBadRequest, err.Error()}
	default:
		h.log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		ae = &apiError{http.StatusInternalServerError, "internal error: see the server log"}
	}
	writeError(w, ae)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, map[string]any{"error": e.msg, "status": e.status})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// filterParams are the query parameters of the event filter.
var filterParams = []string{"status", "aggregate_type", "aggregate_id", "event_type", "created_after", "created_before", "error", "route"}

// filter is a parsed event filter.
type filter struct {
	store.EventQuery
	Route string
}

// parseFilter reads the filter parameters; extra names the other
// parameters the endpoint accepts. Any other parameter is refused, so
// that a typo never widens a bulk action.
func parseFilter(v url.Values, extra ...string) (filter, error) {
	var f filter
	for k := range v {
		if !slices.Contains(filterParams, k) && !slices.Contains(extra, k) {
			return f, badRequest("unknown parameter %q: the filters are %s", k, strings.Join(filterParams, ", "))
		}
	}
	if s := v.Get("status"); s != "" {
		for _, part := range strings.Split(s, ",") {
			st, err := outbox.ParseStatus(part)
			if err != nil {
				return f, badRequest("status: %v", err)
			}
			f.Statuses = append(f.Statuses, st)
		}
	}
	for name, dst := range map[string]*string{"aggregate_type": &f.AggregateType, "aggregate_id": &f.AggregateID,
		"event_type": &f.EventType, "error": &f.ErrorContains, "route": &f.Route} {
		*dst = v.Get(name)
		if len(*dst) > 200 {
			return f, badRequest("%s: longer than 200 characters", name)
		}
	}
	for name, dst := range map[string]*time.Time{"created_after": &f.CreatedAfter, "created_before": &f.CreatedBefore} {
		if s := v.Get(name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return f, badRequest("%s: %q is not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)", name, s)
			}
			*dst = t
		}
	}
	if !f.CreatedAfter.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedAfter.Before(f.CreatedBefore) {
		return f, badRequest("created_after must be before created_before")
	}
	return f, nil
}

// empty reports whether f selects every event.
func (f filter) empty() bool {
	return len(f.Statuses) == 0 && f.AggregateType == "" && f.AggregateID == "" && f.EventType == "" &&
		f.CreatedAfter.IsZero() && f.CreatedBefore.IsZero() && f.ErrorContains == "" && f.Route == ""
}

func encodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("v1:" + strconv.FormatInt(id, 10)))
}

func decodeCursor(s string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		if rest, ok := strings.CutPrefix(string(b), "v1:"); ok {
			if id, err := strconv.ParseInt(rest, 10, 64); err == nil && id > 0 {
				return id, nil
			}
		}
	}
	return 0, badRequest("cursor: %q is not a cursor this server gave out: start again without it", s)
}

func parseLimit(v url.Values, def, max int) (int, error) {
	s := v.Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, badRequest("limit: %q is not a positive number", s)
	}
	return min(n, max), nil
}

// eventJSON is an event in API answers.
type eventJSON struct {
	EventID       string            `json:"event_id"`
	Status        outbox.Status     `json:"status"`
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id"`
	EventType     string            `json:"event_type"`
	Route         string            `json:"route"`
	RetryCount    int               `json:"retry_count"`
	CreatedAt     time.Time         `json:"created_at"`
	AvailableAt   time.Time         `json:"available_at"`
	ExpiresAt     *time.Time        `json:"expires_at,omitempty"`
	ProcessedAt   *time.Time        `json:"processed_at,omitempty"`
	LastError     string            `json:"last_error,omitempty"`
	FromHistory   bool              `json:"from_history,omitempty"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Redacted      bool              `json:"redacted,omitempty"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (h *Handler) eventJSON(r store.Record) eventJSON {
	return eventJSON{EventID: r.EventID.String(), Status: r.Status, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
		EventType: r.EventType, Route: h.cfg.Route(r.AggregateType, r.AggregateID, r.EventType), RetryCount: r.RetryCount,
		CreatedAt: r.CreatedAt, AvailableAt: r.AvailableAt, ExpiresAt: optTime(r.ExpiresAt), ProcessedAt: optTime(r.ProcessedAt),
		LastError: r.LastError, FromHistory: r.FromHistory}
}

// routeScanBudget bounds the rows one page of a route-filtered list reads:
// routes are computed, not stored, so the filter runs on pages of rows.
const routeScanBudget = 5000

// queryPage returns one page of events matching f, newest first, and the
// cursor of the next page ("" at the end).
func (h *Handler) queryPage(r *http.Request, f filter, limit int) ([]store.Record, string, error) {
	ctx := r.Context()
	if f.Route == "" {
		f.Limit = limit + 1
		recs, err := h.q.QueryEvents(ctx, f.EventQuery)
		if err != nil {
			return nil, "", err
		}
		if len(recs) > limit {
			return recs[:limit], encodeCursor(recs[limit-1].ID), nil
		}
		return recs, "", nil
	}
	var out []store.Record
	scanned := 0
	for scanned < routeScanBudget {
		f.Limit = store.MaxQueryLimit
		recs, err := h.q.QueryEvents(ctx, f.EventQuery)
		if err != nil {
			return nil, "", err
		}
		for _, rec := range recs {
			scanned++
			f.BeforeID = rec.ID
			if h.cfg.Route(rec.AggregateType, rec.AggregateID, rec.EventType) == f.Route {
				out = append(out, rec)
				if len(out) == limit {
					return out, encodeCursor(rec.ID), nil
				}
			}
		}
		if len(recs) < store.MaxQueryLimit {
			return out, "", nil
		}
	}
	return out, encodeCursor(f.BeforeID), nil
}

func (h *Handler) listEvents(w http.ResponseWriter, r *http.Request, _ Identity) error {
	v := r.URL.Query()
	f, err := parseFilter(v, "cursor", "limit")
	if err != nil {
		return err
	}
	limit, err := parseLimit(v, 50, store.MaxQueryLimit)
	if err != nil {
		return err
	}
	if c := v.Get("cursor"); c != "" {
		if f.BeforeID, err = decodeCursor(c); err != nil {
			return err
		}
	}
	recs, next, err := h.queryPage(r, f, limit)
	if err != nil {
		return err
	}
	events := make([]eventJSON, len(recs))
	for i, rec := range recs {
		events[i] = h.eventJSON(rec)
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": events, "next": next, "limit": limit})
	return nil
}

// attemptJSON is one row of the timeline.
type attemptJSON struct {
	Attempt    int       `json:"attempt"`
	Outcome    string    `json:"outcome"`
	RelayID    string    `json:"relay_id"`
	Actor      string    `json:"actor,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	DurationMS float64   `json:"duration_ms"`
	Error      string    `json:"error,omitempty"`
	// TraceID is the W3C trace id the attempt was sent under.
	TraceID string `json:"trace_id,omitempty"`
	// Receipt is what the destination answered (sink.Receipt's JSON),
	// absent when none was recorded.
	Receipt json.RawMessage `json:"receipt,omitempty"`
}

// eventDetail is the answer of GET /api/v1/events/{event_id}.
type eventDetail struct {
	eventJSON
	Attempts []attemptJSON `json:"attempts"`
	// Destinations, with a fan-out (Config.Destinations), is the event's
	// delivery at each destination: this row only says it was routed.
	Destinations []eventAtDestination `json:"destinations,omitempty"`
}

func parseEventID(r *http.Request) (outbox.EventID, error) {
	s := r.PathValue("event_id")
	id, err := outbox.ParseEventID(s)
	if err != nil {
		return id, badRequest("event id %q is not a UUID", s)
	}
	return id, nil
}

func (h *Handler) detail(r *http.Request, id outbox.EventID, who Identity) (eventDetail, error) {
	rec, err := h.st.GetEvent(r.Context(), id)
	if err != nil {
		return eventDetail{}, err
	}
	atts, err := h.st.Attempts(r.Context(), id)
	if err != nil {
		return eventDetail{}, err
	}
	d := eventDetail{eventJSON: h.eventJSON(rec), Attempts: make([]attemptJSON, 0, len(atts))}
	if h.cfg.RedactPayloads && who.Role != Operator {
		d.Redacted = true
		d.Headers = map[string]string{}
		for k := range rec.Headers {
			d.Headers[k] = "[redacted]"
		}
	} else {
		d.Payload, d.Headers = rec.Payload, rec.Headers
		// A sealed payload is never opened here: the admin holds no
		// key-encryption key. It shows whose data key sealed it instead.
		info, sealed, err := store.DescribeSealed(r.Context(), h.st, rec.Payload)
		if err != nil {
			return eventDetail{}, err
		}
		if sealed {
			d.Payload = info.Placeholder()
		}
	}
	for _, a := range atts {
		d.Attempts = append(d.Attempts, attemptFromStore(a))
	}
	d.Destinations = h.atDestinations(r.Context(), id)
	return d, nil
}

// attemptFromStore is an attempt row as the API shows it.
func attemptFromStore(a store.Attempt) attemptJSON {
	actor, _ := strings.CutPrefix(a.RelayID, "operator:")
	if actor == a.RelayID {
		actor = ""
	}
	return attemptJSON{Attempt: a.Attempt, Outcome: string(a.Outcome), RelayID: a.RelayID, Actor: actor,
		StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, DurationMS: float64(a.FinishedAt.Sub(a.StartedAt).Microseconds()) / 1000,
		Error: a.Error, TraceID: a.TraceID, Receipt: a.Receipt}
}

func (h *Handler) getEvent(w http.ResponseWriter, r *http.Request, who Identity) error {
	id, err := parseEventID(r)
	if err != nil {
		return err
	}
	d, err := h.detail(r, id, who)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (h *Handler) whoami(w http.ResponseWriter, _ *http.Request, who Identity) error {
	writeJSON(w, http.StatusOK, map[string]any{"name": who.Name, "role": who.Role})
	return nil
}

func (h *Handler) listDeadLetters(w http.ResponseWriter, r *http.Request, _ Identity) error {
	v := r.URL.Query()
	for k := range v {
		if k != "limit" {
			return badRequest("unknown parameter %q: dead-letters takes limit", k)
		}
	}
	limit, err := parseLimit(v, 100, 1000)
	if err != nil {
		return err
	}
	dls, err := h.st.DeadLetters(r.Context(), limit)
	if err != nil {
		return err
	}
	type dlJSON struct {
		EventID       string     `json:"event_id"`
		AggregateType string     `json:"aggregate_type"`
		AggregateID   string     `json:"aggregate_id"`
		EventType     string     `json:"event_type"`
		RetryCount    int        `json:"retry_count"`
		Reason        string     `json:"reason"`
		FailedAt      time.Time  `json:"failed_at"`
		RequeuedAt    *time.Time `json:"requeued_at,omitempty"`
	}
	out := make([]dlJSON, len(dls))
	for i, d := range dls {
		out[i] = dlJSON{d.EventID.String(), d.AggregateType, d.AggregateID, d.EventType, d.RetryCount, d.Reason, d.FailedAt, optTime(d.RequeuedAt)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": out})
	return nil
}
