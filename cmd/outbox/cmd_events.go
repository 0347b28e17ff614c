package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/user"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/encrypt"
	"github.com/txoutbox/outbox/store"
)

// EventsCmd groups the per-event commands.
type EventsCmd struct {
	List   EventsListCmd   `cmd:"" help:"List events, newest first."`
	Show   EventsShowCmd   `cmd:"" help:"Show one event and its audit trail."`
	Retry  EventsRetryCmd  `cmd:"" help:"Requeue a FAILED or EXPIRED event, or every one that matches a filter (audited)."`
	Skip   EventsSkipCmd   `cmd:"" help:"Skip a FAILED event so its aggregate moves on (audited)."`
	Replay EventsReplayCmd `cmd:"" help:"Deliver delivered events again, with their ids, in order per aggregate (audited; --dry-run counts)."`
	Purge  EventsPurgeCmd  `cmd:"" help:"Delete final events older than a retention."`
}

// EventsListCmd lists events.
type EventsListCmd struct {
	Status        string `help:"Only this status (PENDING, PROCESSING, PROCESSED, FAILED, EXPIRED, BLOCKED, SKIPPED)."`
	AggregateType string `help:"Only this aggregate type."`
	AggregateID   string `help:"Only this aggregate id."`
	Before        int64  `help:"Only rows with an id below this (for paging)."`
	Limit         int    `help:"Most rows to print (max 1000)." default:"50"`
	JSON          bool   `name:"json" help:"Print JSON lines."`
}

// Run lists events.
func (c *EventsListCmd) Run(ctx context.Context, g *Globals) error {
	f := store.ListFilter{AggregateType: c.AggregateType, AggregateID: c.AggregateID, BeforeID: c.Before, Limit: c.Limit}
	if c.Status != "" {
		st, err := outbox.ParseStatus(c.Status)
		if err != nil {
			return fmt.Errorf("%w: --status: %v", outbox.ErrInvalidConfig, err)
		}
		f.Status = st
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	recs, err := b.store.ListEvents(ctx, f)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(g.stdout)
		for _, r := range recs {
			if err := enc.Encode(recordJSON(r)); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tEVENT ID\tAGGREGATE\tTYPE\tSTATUS\tRETRIES\tCREATED\tLAST ERROR")
	for _, r := range recs {
		fmt.Fprintf(tw, "%d\t%s\t%s/%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.EventID, r.AggregateType, r.AggregateID,
			r.EventType, r.Status, r.RetryCount, r.CreatedAt.UTC().Format(time.RFC3339), short(r.LastError, 60))
	}
	return tw.Flush()
}

// short cuts s to n characters (never inside one) and marks the cut.
func short(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "..."
}

// recordJSON is an event as the JSON output shows it; a sealed payload is
// replaced by whose key sealed it (store.SealedInfo), never shown.
func recordJSON(r store.Record) map[string]any {
	if info, sealed, _ := store.DescribeSealed(context.Background(), nil, r.Payload); sealed {
		r.Payload = info.Placeholder()
	}
	m := map[string]any{
		"id": r.ID, "event_id": r.EventID.String(), "aggregate_type": r.AggregateType, "aggregate_id": r.AggregateID,
		"event_type": r.EventType, "status": r.Status, "retry_count": r.RetryCount, "payload": r.Payload,
		"created_at": r.CreatedAt.UTC(), "available_at": r.AvailableAt.UTC(),
	}
	if len(r.Headers) > 0 {
		m["headers"] = r.Headers
	}
	if !r.ProcessedAt.IsZero() {
		m["processed_at"] = r.ProcessedAt.UTC()
	}
	if !r.ExpiresAt.IsZero() {
		m["expires_at"] = r.ExpiresAt.UTC()
	}
	if !r.LockedUntil.IsZero() {
		m["locked_until"] = r.LockedUntil.UTC()
	}
	if r.LastError != "" {
		m["last_error"] = r.LastError
	}
	if r.FromHistory {
		m["from_history"] = true
	}
	return m
}

// EventsShowCmd prints one event with its audit trail.
type EventsShowCmd struct {
	EventID string `arg:"" help:"The event id (UUID)."`
	JSON    bool   `name:"json" help:"Print JSON."`
}

// Run shows the event.
func (c *EventsShowCmd) Run(ctx context.Context, g *Globals) error {
	id, err := outbox.ParseEventID(c.EventID)
	if err != nil {
		return fmt.Errorf("%w: %v", outbox.ErrInvalidConfig, err)
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	if g.Config == "" {
		return ShowEvent(ctx, g.stdout, b.store, id, c.JSON)
	}
	return c.showAtDestinations(ctx, g, b.store, id)
}

// ShowEvent prints an event and its attempts, as `outbox events show` does.
func ShowEvent(ctx context.Context, w io.Writer, s store.Store, id outbox.EventID, asJSON bool) error {
	r, err := s.GetEvent(ctx, id)
	if err != nil {
		return err
	}
	atts, err := s.Attempts(ctx, id)
	if err != nil {
		return err
	}
	if asJSON {
		m := eventJSON(r, atts)
		return json.NewEncoder(w).Encode(withSealedInfo(ctx, s, r, m))
	}
	return printEvent(ctx, w, r, atts, s)
}

// withSealedInfo puts in m, in place of a sealed payload, whose data key
// sealed it and whether that key (read from keys) was shredded.
func withSealedInfo(ctx context.Context, keys encrypt.KeyStore, r store.Record, m map[string]any) map[string]any {
	if info, sealed, err := store.DescribeSealed(ctx, keys, r.Payload); sealed && err == nil {
		m["payload"] = info.Placeholder()
	}
	return m
}

// printEvent prints an event and its attempts as text.
// A sealed payload is shown as whose data key sealed it (and whether keys
// says that key was shredded), never opened.
func printEvent(ctx context.Context, w io.Writer, r store.Record, atts []store.Attempt, keys encrypt.KeyStore) error {
	info, sealed, err := store.DescribeSealed(ctx, keys, r.Payload)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "event\t%s (row %d)\n", r.EventID, r.ID)
	fmt.Fprintf(tw, "aggregate\t%s/%s\n", r.AggregateType, r.AggregateID)
	fmt.Fprintf(tw, "type\t%s\n", r.EventType)
	fmt.Fprintf(tw, "status\t%s (retry_count %d)\n", r.Status, r.RetryCount)
	if r.FromHistory {
		fmt.Fprintf(tw, "from history\tyes: it finished and moved out of the hot table (outbox history)\n")
	}
	fmt.Fprintf(tw, "created\t%s\n", r.CreatedAt.UTC().Format(time.RFC3339Nano))
	if !r.ExpiresAt.IsZero() {
		fmt.Fprintf(tw, "expires\t%s\n", r.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	if !r.ProcessedAt.IsZero() {
		fmt.Fprintf(tw, "finished\t%s\n", r.ProcessedAt.UTC().Format(time.RFC3339Nano))
	}
	if r.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s\n", r.LastError)
	}
	if id := r.Headers[outbox.HeaderCompensates]; id != "" {
		fmt.Fprintf(tw, "compensates\t%s (it expired)\n", id)
	}
	if sealed {
		fmt.Fprintf(tw, "payload\t%s\n", info)
	} else {
		fmt.Fprintf(tw, "payload\t%s\n", short(string(r.Payload), 200))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "attempts (%d):\n", len(atts))
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tOUTCOME\tRELAY\tSTARTED\tTOOK\tTRACE\tERROR")
	for _, a := range atts {
		trace := a.TraceID
		if trace == "" {
			trace = "-"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, a.Outcome, a.RelayID,
			a.StartedAt.UTC().Format("2006-01-02T15:04:05.000Z"), a.FinishedAt.Sub(a.StartedAt).Round(time.Millisecond), trace, a.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, a := range atts {
		if a.Receipt != nil {
			fmt.Fprintf(w, "  receipt of attempt %d (%s): %s\n", a.Attempt, a.Outcome, receiptSummary(a.Receipt))
		}
	}
	return nil
}

// eventJSON is an event and its attempts as `outbox events show --json`
// prints them.
func eventJSON(r store.Record, atts []store.Attempt) map[string]any {
	m := recordJSON(r)
	list := make([]map[string]any, 0, len(atts))
	for _, a := range atts {
		at := map[string]any{"attempt": a.Attempt, "relay_id": a.RelayID, "claim_token": a.ClaimToken,
			"started_at": a.StartedAt.UTC(), "finished_at": a.FinishedAt.UTC(), "outcome": a.Outcome, "error": a.Error, "trace_id": a.TraceID}
		if a.Receipt != nil {
			at["receipt"] = a.Receipt
		}
		list = append(list, at)
	}
	m["attempts"] = list
	return m
}

func actorName(flag string) string {
	if flag != "" {
		return flag
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if v := os.Getenv("USER"); v != "" {
		return v
	}
	return "operator"
}

// EventsRetryCmd requeues a FAILED or EXPIRED event, or every event that
// matches a filter.
type EventsRetryCmd struct {
	EventID string        `arg:"" optional:"" help:"The event id (UUID). Without it, --status selects the events to requeue."`
	Actor   string        `help:"Who is acting, for the audit trail (default: the OS user)."`
	Reason  string        `help:"Why, for the audit trail."`
	TTL     time.Duration `help:"A new deadline, from now. Without it, a deadline that has passed is removed."`

	Status        string `help:"Requeue every event in this status (FAILED or EXPIRED) that matches the other filters." placeholder:"FAILED"`
	ErrorLike     string `help:"Only events whose last error matches this SQL LIKE pattern (% any run, _ one character; ASCII case ignored), e.g. '%status 503%' (a bare '%503%' also matches event ids and times that contain 503)."`
	Since         string `help:"Only events that ended at or after this time (RFC 3339, e.g. 2026-12-01T10:00:00Z, or a duration ago, e.g. 2h)."`
	Until         string `help:"Only events that ended before this time (same forms as --since)."`
	AggregateType string `help:"Only events of this aggregate type."`
	DryRun        bool   `help:"Print how many events match, and requeue nothing."`
}

// Run requeues.
func (c *EventsRetryCmd) Run(ctx context.Context, g *Globals) error {
	filtered := c.Status != "" || c.ErrorLike != "" || c.Since != "" || c.Until != "" || c.AggregateType != "" || c.DryRun
	switch {
	case c.EventID != "" && filtered:
		return fmt.Errorf("%w: give an event id or a filter (--status, --error-like, --since, --until, --aggregate-type, --dry-run), not both", outbox.ErrInvalidConfig)
	case c.EventID != "":
		return operatorAction(ctx, g, c.EventID, func(s store.Store, id outbox.EventID) error {
			return s.Requeue(ctx, store.OperatorAction{EventID: id, Actor: actorName(c.Actor), Reason: c.Reason, NewTTL: c.TTL})
		}, "requeued")
	case c.Status == "":
		return fmt.Errorf("%w: give the event id to requeue, or --status FAILED (or EXPIRED) with optional --error-like, --since, --until and --aggregate-type to requeue every event that matches", outbox.ErrInvalidConfig)
	}
	f, err := c.filter(time.Now())
	if err != nil {
		return err
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	if c.DryRun {
		n, err := b.store.CountMatching(ctx, f)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "%d events match (%s); run again without --dry-run to requeue them\n", n, f)
		return nil
	}
	n, err := b.store.RequeueMatching(ctx, f, store.OperatorAction{Actor: actorName(c.Actor), Reason: c.Reason, NewTTL: c.TTL})
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "requeued %d events (%s)\n", n, f)
	return nil
}

// filter builds the store filter from the flags; relative times count
// back from now.
func (c *EventsRetryCmd) filter(now time.Time) (store.RequeueFilter, error) {
	st, err := outbox.ParseStatus(c.Status)
	if err != nil {
		return store.RequeueFilter{}, fmt.Errorf("%w: --status: %v", outbox.ErrInvalidConfig, err)
	}
	f := store.RequeueFilter{Status: st, ErrorLike: c.ErrorLike, AggregateType: c.AggregateType}
	if f.Since, err = parseWhen("--since", c.Since, now); err != nil {
		return f, err
	}
	if f.Until, err = parseWhen("--until", c.Until, now); err != nil {
		return f, err
	}
	return f, f.Validate()
}

// parseWhen reads a time flag: RFC 3339, or a duration before now.
func parseWhen(flag, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%w: %s %q: use an RFC 3339 time such as 2026-12-01T10:00:00Z or a duration ago such as 2h", outbox.ErrInvalidConfig, flag, v)
}

// EventsSkipCmd skips a FAILED event.
type EventsSkipCmd struct {
	EventID string `arg:"" help:"The event id (UUID)."`
	Actor   string `help:"Who is acting, for the audit trail (default: the OS user)."`
	Reason  string `help:"Why, for the audit trail."`
}

// Run skips.
func (c *EventsSkipCmd) Run(ctx context.Context, g *Globals) error {
	return operatorAction(ctx, g, c.EventID, func(s store.Store, id outbox.EventID) error {
		return s.Skip(ctx, store.OperatorAction{EventID: id, Actor: actorName(c.Actor), Reason: c.Reason})
	}, "skipped")
}

func operatorAction(ctx context.Context, g *Globals, rawID string, act func(store.Store, outbox.EventID) error, done string) error {
	id, err := outbox.ParseEventID(rawID)
	if err != nil {
		return fmt.Errorf("%w: %v", outbox.ErrInvalidConfig, err)
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	if err := act(b.store, id); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "%s %s\n", done, id)
	return nil
}

// EventsPurgeCmd deletes old final events.
type EventsPurgeCmd struct {
	OlderThan time.Duration `help:"Delete events that finished longer ago than this." required:""`
	Status    []string      `help:"Statuses to purge (default PROCESSED,EXPIRED; FAILED and SKIPPED also remove their dead letters)."`
	Adopted   bool          `help:"On an adopted table, also delete the rows that had finished before the adoption (kept by default)."`
}

// Run purges.
func (c *EventsPurgeCmd) Run(ctx context.Context, g *Globals) error {
	var statuses []outbox.Status
	for _, s := range c.Status {
		st, err := outbox.ParseStatus(s)
		if err != nil {
			return fmt.Errorf("%w: --status: %v", outbox.ErrInvalidConfig, err)
		}
		statuses = append(statuses, st)
	}
	b, err := openBackend(ctx, g.DB, g.Table, outbox.Limits{}, g.logger)
	if err != nil {
		return err
	}
	defer b.close()
	n, err := b.store.Purge(ctx, store.PurgeRequest{OlderThan: c.OlderThan, Statuses: statuses, Adopted: c.Adopted})
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "deleted %d events\n", n)
	if err := store.RecordRetention(ctx, b.store, c.OlderThan, n, "operator:"+actorName(""),
		"final events and their attempts and dead letters, by outbox events purge"); err != nil {
		return fmt.Errorf("deleted %d events, but could not note it in the audit log (outbox audit verify will count their attempts as deleted by hand): %w", n, err)
	}
	return nil
}
