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

// actionResult is the answer of every action, dry run or not.
type actionResult struct {
	Action   string `json:"action"`
	DryRun   bool   `json:"dry_run"`
	Actor    string `json:"actor"`
	Matched  int64  `json:"matched"`
	Applied  int64  `json:"applied"`
	Conflict int64  `json:"conflicts,omitempty"` // changed by someone else between the selection and the change
	Gone     int64  `json:"gone,omitempty"`      // deleted in between
	// ByStatus counts the matched events per status.
	ByStatus map[outbox.Status]int64 `json:"by_status,omitempty"`
	// BlockedReleased counts the BLOCKED events behind the matched FAILED
	// events that the action releases (at most: another FAILED event of the
	// aggregate may still hold some), PastDeadline those of them past
	// their deadline, which the sweeper then moves to EXPIRED.
	BlockedReleased int64 `json:"blocked_released"`
	PastDeadline    int64 `json:"past_deadline"`
	// ExpiredRevived counts matched EXPIRED events a retry sends again.
	ExpiredRevived int64  `json:"expired_revived,omitempty"`
	Summary        string `json:"summary"`
	Error          string `json:"error,omitempty"`
}

func (a *actionResult) summarize() {
	verb := map[bool]string{true: "would " + a.Action, false: a.Action}[a.DryRun]
	if !a.DryRun {
		verb = map[string]string{"retry": "retried", "skip": "skipped", "purge": "purged"}[a.Action]
	}
	n := a.Matched
	if !a.DryRun {
		n = a.Applied
	}
	s := fmt.Sprintf("%s %d event%s", verb, n, plural(n))
	if a.Action != "purge" {
		rel := "releases"
		if a.DryRun {
			rel = "would release"
		}
		s += fmt.Sprintf("; %s up to %d BLOCKED event%s", rel, a.BlockedReleased, plural(a.BlockedReleased))
		if a.PastDeadline > 0 {
			s += fmt.Sprintf("; %d %s past the deadline and will go EXPIRED", a.PastDeadline, map[bool]string{true: "is", false: "are"}[a.PastDeadline == 1])
		}
		if a.ExpiredRevived > 0 {
			s += fmt.Sprintf("; %d EXPIRED event%s will be sent after all (deadline removed)", a.ExpiredRevived, plural(a.ExpiredRevived))
		}
	}
	if a.Conflict > 0 {
		s += fmt.Sprintf("; %d changed meanwhile and were left alone", a.Conflict)
	}
	a.Summary = s
}

func plural(n int64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// actionParams are the parameters every retry and skip takes.
type actionParams struct {
	dryRun bool
	reason string
	ttl    time.Duration
	// destination, for an action on one event: act on its copy in that
	// destination's table (Config.Destinations) instead of the outbox's.
	destination string
}

func parseActionParams(v url.Values, change store.OperatorChange) (actionParams, error) {
	var p actionParams
	if s := v.Get("dry_run"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return p, badRequest("dry_run: %q is not true or false", s)
		}
		p.dryRun = b
	}
	p.reason = v.Get("reason")
	if len(p.reason) > 500 {
		return p, badRequest("reason: longer than 500 characters")
	}
	if s := v.Get("ttl"); s != "" {
		if change.Kind != store.Requeued {
			return p, badRequest("ttl applies to retry only")
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return p, badRequest("ttl: %q is not a positive duration (e.g. 66s, 10m)", s)
		}
		p.ttl = d
	}
	return p, nil
}

var actionParamNames = []string{"dry_run", "reason", "ttl"}

// oneActionParamNames are the parameters of an action on one event.
var oneActionParamNames = append(slices.Clip(actionParamNames), "destination")

func actionName(c store.OperatorChange) string {
	if c.Kind == store.Requeued {
		return "retry"
	}
	return "skip"
}

func (h *Handler) apply(ctx context.Context, c store.OperatorChange, a store.OperatorAction) error {
	return applyTo(ctx, h.st, c, a)
}

func applyTo(ctx context.Context, st store.Store, c store.OperatorChange, a store.OperatorAction) error {
	if c.Kind == store.Requeued {
		return st.Requeue(ctx, a)
	}
	return st.Skip(ctx, a)
}

// actionTable is the table an action on one event changes: the outbox's,
// or a destination's.
type actionTable struct {
	st    store.Store
	q     store.AdminQueries
	close func()
}

// tableOf returns the table of the named destination, or the outbox's
// for "".
func (h *Handler) tableOf(destination string) (actionTable, error) {
	if destination == "" {
		return actionTable{st: h.st, q: h.q, close: func() {}}, nil
	}
	names := make([]string, 0, len(h.cfg.Destinations))
	for _, d := range h.cfg.Destinations {
		if d.Name == destination {
			q := d.Store.AdminQueries()
			return actionTable{st: d.Store, q: q, close: func() { _ = q.Close() }}, nil
		}
		names = append(names, d.Name)
	}
	if len(names) == 0 {
		return actionTable{}, badRequest("destination %q: this admin has no destinations (outbox admin --config FILE gives them)", destination)
	}
	return actionTable{}, &apiError{http.StatusNotFound, fmt.Sprintf("no destination %q: the destinations are %s", destination, strings.Join(names, ", "))}
}

func (h *Handler) retryOne(w http.ResponseWriter, r *http.Request, who Identity) error {
	return h.actOne(w, r, who, store.RequeueChange)
}

func (h *Handler) skipOne(w http.ResponseWriter, r *http.Request, who Identity) error {
	return h.actOne(w, r, who, store.SkipChange)
}

// actOne retries or skips one event: 404 if there is none, 409 if its
// status does not allow the change (also when another operator changed it
// first).
func (h *Handler) actOne(w http.ResponseWriter, r *http.Request, who Identity, c store.OperatorChange) error {
	id, err := parseEventID(r)
	if err != nil {
		return err
	}
	v := r.URL.Query()
	for k := range v {
		if !slices.Contains(oneActionParamNames, k) {
			return badRequest("unknown parameter %q: %s takes %s", k, actionName(c), strings.Join(oneActionParamNames, ", "))
		}
	}
	p, err := parseActionParams(v, c)
	if err != nil {
		return err
	}
	p.destination = v.Get("destination")
	res, err := h.actOneCore(r.Context(), who, c, id, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// actOneCore checks and (unless a dry run) applies c to one event.
func (h *Handler) actOneCore(ctx context.Context, who Identity, c store.OperatorChange, id outbox.EventID, p actionParams) (actionResult, error) {
	res := actionResult{Action: actionName(c), DryRun: p.dryRun, Actor: who.Name, ByStatus: map[outbox.Status]int64{}}
	t, err := h.tableOf(p.destination)
	if err != nil {
		return res, err
	}
	defer t.close()
	rec, err := t.st.GetEvent(ctx, id)
	if err != nil {
		return res, err
	}
	action := store.OperatorAction{EventID: id, Actor: who.Name, Reason: p.reason, NewTTL: p.ttl}
	if err := c.Check(action, string(rec.Status)); err != nil {
		return res, err
	}
	res.Matched, res.ByStatus[rec.Status] = 1, 1
	if err := blastRadius(ctx, t.q, &res, []store.MatchedEvent{{ID: rec.ID, EventID: rec.EventID, Status: rec.Status}}); err != nil {
		return res, err
	}
	if !p.dryRun {
		if err := applyTo(ctx, t.st, c, action); err != nil {
			return res, err
		}
		res.Applied = 1
		h.log.Info("admin action", "action", res.Action, "actor", who.Name, "event_id", id.String(), "reason", p.reason, "destination", p.destination)
	}
	res.summarize()
	return res, nil
}

// blastRadius adds what changing the matched events releases.
func (h *Handler) blastRadius(ctx context.Context, res *actionResult, ms []store.MatchedEvent) error {
	return blastRadius(ctx, h.q, res, ms)
}

func blastRadius(ctx context.Context, q store.AdminQueries, res *actionResult, ms []store.MatchedEvent) error {
	var failed []int64
	for _, m := range ms {
		if m.Status == outbox.StatusFailed {
			failed = append(failed, m.ID)
		}
		if m.Status == outbox.StatusExpired && res.Action == "retry" {
			res.ExpiredRevived++
		}
	}
	blocked, past, err := q.CountBlockedBehind(ctx, failed)
	res.BlockedReleased += blocked
	res.PastDeadline += past
	return err
}

func (h *Handler) retryMatching(w http.ResponseWriter, r *http.Request, who Identity) error {
	return h.actMatching(w, r, who, store.RequeueChange)
}

func (h *Handler) skipMatching(w http.ResponseWriter, r *http.Request, who Identity) error {
	return h.actMatching(w, r, who, store.SkipChange)
}

// actMatching applies a change to every event the filter matches, on the
// server, in pages in id order (so per aggregate in id order), each event
// in a transaction of its own with its audit row naming the operator: no
// transaction lasts longer than one event. It runs as a job (see jobs.go):
// the answer is the result (200) if the job finished within
// Config.BulkWait, else the job (202) with its progress so far. Once
// started it runs to the end even if the client goes away. A dry run
// changes nothing and answers at once.
func (h *Handler) actMatching(w http.ResponseWriter, r *http.Request, who Identity, c store.OperatorChange) error {
	v := r.URL.Query()
	f, err := parseFilter(v, actionParamNames...)
	if err != nil {
		return err
	}
	p, err := parseActionParams(v, c)
	if err != nil {
		return err
	}
	if err := bulkStatuses(c, &f); err != nil {
		return err
	}
	if p.dryRun {
		res, err := h.actMatchingCore(r.Context(), who, c, f, p, nil)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	j := h.startBulk(who, c, f, p)
	if !h.waitBulk(r.Context(), j) {
		w.Header().Set("Location", "/api/v1/jobs/"+j.id)
		writeJSON(w, http.StatusAccepted, j.snapshot())
		return nil
	}
	snap := j.snapshot()
	status := http.StatusOK
	if snap.State != jobDone {
		status = http.StatusInternalServerError
	}
	writeJSON(w, status, snap.Result)
	return nil
}

// startBulk starts the bulk action as a job.
func (h *Handler) startBulk(who Identity, c store.OperatorChange, f filter, p actionParams) *bulkJob {
	return h.jobs.start(func(ctx context.Context, j *bulkJob) (actionResult, error) {
		return h.actMatchingCore(ctx, who, c, f, p, j.progress)
	}, h.stopped)
}

// waitBulk waits up to Config.BulkWait for j and reports whether it
// finished; it stops waiting (the job goes on) when ctx ends.
func (h *Handler) waitBulk(ctx context.Context, j *bulkJob) bool {
	if h.cfg.BulkWait < 0 {
		select {
		case <-j.done:
			return true
		default:
			return false
		}
	}
	t := time.NewTimer(h.cfg.BulkWait)
	defer t.Stop()
	select {
	case <-j.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// bulkStatuses defaults the filter's statuses to those c applies to and
// refuses the others.
func bulkStatuses(c store.OperatorChange, f *filter) error {
	if len(f.Statuses) == 0 {
		f.Statuses = c.From
	}
	for _, s := range f.Statuses {
		if !slices.Contains(c.From, s) {
			return badRequest("status: %s applies to %s events, not %s", actionName(c), strings.Join(store.StatusNames(c.From), " or "), s)
		}
	}
	return nil
}

// actMatchingCore is actMatching without HTTP: it reports the result so
// far to progress (if not nil) after each event. On a database error it
// returns what it did until then with the error.
func (h *Handler) actMatchingCore(ctx context.Context, who Identity, c store.OperatorChange, f filter, p actionParams, progress func(*actionResult)) (actionResult, error) {
	res := actionResult{Action: actionName(c), DryRun: p.dryRun, Actor: who.Name, ByStatus: map[outbox.Status]int64{}}
	if err := bulkStatuses(c, &f); err != nil {
		return res, err
	}
	var after int64
	for {
		ms, err := h.q.MatchIDs(ctx, f.EventQuery, after, h.cfg.BulkPageSize)
		if err != nil {
			return res, err
		}
		if len(ms) == 0 {
			break
		}
		after = ms[len(ms)-1].ID
		if f.Route != "" {
			ms = h.onRoute(ctx, ms, f.Route)
		}
		res.Matched += int64(len(ms))
		for _, m := range ms {
			res.ByStatus[m.Status]++
		}
		if err := h.blastRadius(ctx, &res, ms); err != nil {
			return res, err
		}
		if p.dryRun {
			continue
		}
		for _, m := range ms {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			err := h.apply(ctx, c, store.OperatorAction{EventID: m.EventID, Actor: who.Name, Reason: p.reason, NewTTL: p.ttl})
			switch {
			case err == nil:
				res.Applied++
			case errors.Is(err, outbox.ErrConflict):
				res.Conflict++
			case errors.Is(err, outbox.ErrNotFound):
				res.Gone++
			default:
				return res, err
			}
			if progress != nil {
				progress(&res)
			}
		}
	}
	if !p.dryRun {
		h.log.Info("admin bulk action", "action", res.Action, "actor", who.Name, "matched", res.Matched, "applied", res.Applied,
			"conflicts", res.Conflict, "reason", p.reason)
	}
	res.summarize()
	return res, nil
}

// onRoute keeps the matched events whose route is route.
func (h *Handler) onRoute(ctx context.Context, ms []store.MatchedEvent, route string) []store.MatchedEvent {
	out := ms[:0]
	for _, m := range ms {
		rec, err := h.st.GetEvent(ctx, m.EventID)
		if err == nil && h.cfg.Route(rec.AggregateType, rec.AggregateID, rec.EventType) == route {
			out = append(out, m)
		}
	}
	return out
}

// stopped logs a bulk action that stopped on err and says so in res
// (each applied change is committed).
func (h *Handler) stopped(res *actionResult, err error) {
	h.log.Error("admin bulk action stopped", "action", res.Action, "actor", res.Actor, "applied", res.Applied, "err", err)
	res.summarize()
	res.Error = "stopped on a database error after the changes counted in applied (see the server log); run it again to continue"
	if errors.Is(err, context.Canceled) {
		res.Error = "stopped by the server shutting down after the changes counted in applied; run it again to continue"
	}
}

// partial answers an action that stopped on an error with what it did
// until then.
func (h *Handler) partial(w http.ResponseWriter, res *actionResult, err error) error {
	h.stopped(res, err)
	writeJSON(w, http.StatusInternalServerError, res)
	return nil
}

// purge deletes final events older than older_than (PurgeRequest).
func (h *Handler) purge(w http.ResponseWriter, r *http.Request, who Identity) error {
	v := r.URL.Query()
	for k := range v {
		if k != "older_than" && k != "status" && k != "dry_run" {
			return badRequest("unknown parameter %q: purge takes older_than, status, dry_run", k)
		}
	}
	s := v.Get("older_than")
	older, err := time.ParseDuration(s)
	if s == "" || err != nil || older < 0 {
		return badRequest("older_than: %q is not a duration (e.g. 720h): it is required", s)
	}
	var req store.PurgeRequest
	req.OlderThan = older
	if st := v.Get("status"); st != "" {
		for _, part := range strings.Split(st, ",") {
			s, err := outbox.ParseStatus(part)
			if err != nil {
				return badRequest("status: %v", err)
			}
			req.Statuses = append(req.Statuses, s)
		}
	}
	if req, err = req.Normalize(); err != nil {
		return badRequest("%v", err)
	}
	dry := false
	if d := v.Get("dry_run"); d != "" {
		if dry, err = strconv.ParseBool(d); err != nil {
			return badRequest("dry_run: %q is not true or false", d)
		}
	}
	res := actionResult{Action: "purge", DryRun: dry, Actor: who.Name, ByStatus: map[outbox.Status]int64{}}
	if dry {
		// created_at <= processed_at, so this counts at least every event
		// the purge deletes.
		q := store.EventQuery{Statuses: req.Statuses, CreatedBefore: time.Now().Add(-older)}
		var after int64
		for {
			ms, err := h.q.MatchIDs(r.Context(), q, after, 5000)
			if err != nil {
				return err
			}
			if len(ms) == 0 {
				break
			}
			after = ms[len(ms)-1].ID
			res.Matched += int64(len(ms))
			for _, m := range ms {
				res.ByStatus[m.Status]++
			}
		}
		res.summarize()
		res.Summary = strings.Replace(res.Summary, "would purge", "would purge up to", 1)
	} else {
		n, err := h.st.Purge(context.WithoutCancel(r.Context()), req)
		res.Matched, res.Applied = n, n
		if err != nil {
			return h.partial(w, &res, err)
		}
		h.log.Info("admin purge", "actor", who.Name, "older_than", older.String(), "statuses", store.StatusNames(req.Statuses), "deleted", n)
		if err := store.RecordRetention(context.WithoutCancel(r.Context()), h.st, req.OlderThan, n, "operator:"+who.Name,
			"final events and their attempts and dead letters, by the admin API's purge"); err != nil {
			return h.partial(w, &res, fmt.Errorf("the purge is done, but could not be noted in the audit log: %w", err))
		}
		res.summarize()
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
