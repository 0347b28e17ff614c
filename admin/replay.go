package admin

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox/store"
)

// replayResult is the answer of a replay, dry run or not.
type replayResult struct {
	Action      string          `json:"action"` // "replay"
	DryRun      bool            `json:"dry_run"`
	Actor       string          `json:"actor"`
	Reason      string          `json:"reason"`
	Filter      string          `json:"filter"`
	Destination string          `json:"destination,omitempty"`
	Events      int64           `json:"events"`
	Aggregates  int64           `json:"aggregates"`
	Held        []heldAggregate `json:"held"`
	Summary     string          `json:"summary"`
}

// heldAggregate is an aggregate the replay left alone.
type heldAggregate struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	EventID       string `json:"event_id"`
	Status        string `json:"status"`
	Matched       int64  `json:"matched"`
}

// replayParamNames are the parameters of POST /api/v1/events/replay.
var replayParamNames = []string{"aggregate_type", "aggregate_id", "event_type", "since", "until", "reason", "dry_run", "destination"}

// parseReplay reads a replay's parameters (a query or a posted form).
func parseReplay(v url.Values, who Identity) (store.ReplayRequest, string, error) {
	var req store.ReplayRequest
	for k := range v {
		if !slices.Contains(replayParamNames, k) && k != "csrf_token" && k != "confirm" {
			return req, "", badRequest("unknown parameter %q: replay takes %s", k, strings.Join(replayParamNames, ", "))
		}
	}
	f := store.ReplayFilter{AggregateType: v.Get("aggregate_type"), AggregateID: v.Get("aggregate_id"), EventType: v.Get("event_type")}
	for _, b := range []struct {
		name string
		to   *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if s := v.Get(b.name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return req, "", badRequest("%s: %q is not an RFC 3339 time such as 2026-12-01T10:00:00Z", b.name, s)
			}
			*b.to = t
		}
	}
	req.Filter = f
	req.Action = store.OperatorAction{Actor: who.Name, Reason: v.Get("reason")}
	if len(req.Action.Reason) > 500 {
		return req, "", badRequest("reason: longer than 500 characters")
	}
	if s := v.Get("dry_run"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return req, "", badRequest("dry_run: %q is not true or false", s)
		}
		req.DryRun = b
	}
	if err := req.Validate(); err != nil {
		return req, "", badRequest("%s", err.Error())
	}
	return req, v.Get("destination"), nil
}

// replayCore runs the replay (or its dry run) on the outbox's table or a
// destination's, and logs it with the operator, reason, filter and counts.
func (h *Handler) replayCore(ctx context.Context, req store.ReplayRequest, destination string) (replayResult, error) {
	if destination == "" && len(h.cfg.Destinations) > 0 {
		names := make([]string, 0, len(h.cfg.Destinations))
		for _, d := range h.cfg.Destinations {
			names = append(names, d.Name)
		}
		return replayResult{}, badRequest("this outbox's events are copied to destinations, never sent from its own table: "+
			"give destination (one of %s) to replay one destination's copies", strings.Join(names, ", "))
	}
	t, err := h.tableOf(destination)
	if err != nil {
		return replayResult{}, err
	}
	defer t.close()
	res, err := t.st.Replay(ctx, req)
	if err != nil {
		return replayResult{}, err
	}
	if err := store.RecordReplay(ctx, t.st, req, res); err != nil {
		return replayResult{}, fmt.Errorf("the replay is done (%d events), but could not be noted in the audit log: %w", res.Events, err)
	}
	msg := "replay"
	if req.DryRun {
		msg = "replay dry run"
	}
	h.log.Info(msg, "operator", req.Action.Actor, "reason", req.Action.Reason, "filter", req.Filter.String(),
		"destination", destination, "events", res.Events, "aggregates", res.Aggregates, "held_aggregates", len(res.Held))
	out := replayResult{Action: "replay", DryRun: req.DryRun, Actor: req.Action.Actor, Reason: req.Action.Reason,
		Filter: req.Filter.String(), Destination: destination, Events: res.Events, Aggregates: res.Aggregates, Held: []heldAggregate{}}
	for _, a := range res.Held {
		out.Held = append(out.Held, heldAggregate{AggregateType: a.AggregateType, AggregateID: a.AggregateID,
			EventID: a.EventID.String(), Status: string(a.Status), Matched: a.Matched})
	}
	verb := "replayed"
	if req.DryRun {
		verb = "would replay"
	}
	out.Summary = fmt.Sprintf("%s %d event%s of %d aggregate%s (%s)", verb, res.Events, plural(res.Events),
		res.Aggregates, plural(res.Aggregates), out.Filter)
	if n := len(res.Held); n > 0 {
		out.Summary += fmt.Sprintf("; %d aggregate%s left alone: an event of theirs is in flight, FAILED or BLOCKED (%s)",
			n, plural(int64(n)), res.Held[0])
	}
	return out, nil
}

// replayMatching is POST /api/v1/events/replay: the replay of the
// delivered events its parameters select, or its dry run. An aggregate left
// alone is listed in held; the answer is 200 either way.
func (h *Handler) replayMatching(w http.ResponseWriter, r *http.Request, who Identity) error {
	req, destination, err := parseReplay(r.URL.Query(), who)
	if err != nil {
		return err
	}
	res, err := h.replayCore(r.Context(), req, destination)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// replayEventPage is the dashboard's replay of the delivered events of an
// event's aggregate: a dry run that asks to confirm, or, with
// confirm=yes, the replay.
func (h *Handler) replayEventPage(w http.ResponseWriter, r *http.Request, v *view) (string, error) {
	id, err := parseEventID(r)
	if err != nil {
		return "", err
	}
	ev, err := h.st.GetEvent(r.Context(), id)
	if err != nil {
		return "", err
	}
	form := url.Values{"aggregate_type": {ev.AggregateType}, "aggregate_id": {ev.AggregateID}, "reason": {r.PostFormValue("reason")},
		"dry_run": {strconv.FormatBool(r.PostFormValue("confirm") != "yes")}}
	if strings.TrimSpace(form.Get("reason")) == "" {
		return "", badRequest("a replay needs a reason: it goes in the log and in the audit row of every replayed event")
	}
	req, _, err := parseReplay(form, v.Who)
	if err != nil {
		return "", err
	}
	destination := r.PostFormValue("destination")
	res, err := h.replayCore(r.Context(), req, destination)
	if err != nil {
		return "", err
	}
	if !req.DryRun {
		http.Redirect(w, r, "/events/"+id.String()+"?done="+url.QueryEscape(res.Summary), http.StatusSeeOther)
		return "", nil
	}
	v.Title, v.Nav = "Confirm replay", "events"
	v.Data = confirmData{Action: "replay", Replay: &res, Target: template.URL(r.URL.Path), Back: template.URL("/events/" + id.String()),
		Reason: r.PostFormValue("reason"), Destination: destination}
	return "confirm", nil
}
