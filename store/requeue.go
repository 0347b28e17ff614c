package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
)

// RequeueFilter selects the FAILED or EXPIRED events that
// Store.RequeueMatching returns to PENDING, for example the casualties of
// an outage: FAILED, last_error like '%503%', ended since the outage began.
type RequeueFilter struct {
	// Status is FAILED or EXPIRED (required).
	Status outbox.Status
	// ErrorLike is an SQL LIKE pattern on last_error: % matches any run
	// of characters, _ one character, \ escapes them. ASCII letters match
	// either case on every backend. Empty: any error.
	ErrorLike string
	// Since and Until bound when the event ended (processed_at):
	// Since <= processed_at < Until. Zero: no bound.
	Since, Until time.Time
	// AggregateType, when set, keeps only events of that aggregate type.
	AggregateType string
}

// RequeuePageSize is how many matching events RequeueMatching reads at a
// time; each is then requeued in a transaction of its own.
const RequeuePageSize = 500

// Validate returns an outbox.ErrInvalidConfig error that says what to fix.
func (f RequeueFilter) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: requeue filter: %s", outbox.ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case f.Status != outbox.StatusFailed && f.Status != outbox.StatusExpired:
		return bad("status %q cannot be requeued: use FAILED or EXPIRED", f.Status)
	case !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until):
		return bad("since %s is not before until %s", f.Since.UTC().Format(time.RFC3339), f.Until.UTC().Format(time.RFC3339))
	case strings.IndexByte(f.ErrorLike, 0) >= 0:
		return bad("the error pattern contains a NUL byte")
	}
	return nil
}

// String describes the filter for the audit trail and messages:
// "status FAILED, error like '%503%', ended since 2026-12-01T10:00:00Z".
func (f RequeueFilter) String() string {
	parts := []string{"status " + string(f.Status)}
	if f.ErrorLike != "" {
		parts = append(parts, fmt.Sprintf("error like %q", f.ErrorLike))
	}
	if !f.Since.IsZero() {
		parts = append(parts, "ended since "+f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "ended before "+f.Until.UTC().Format(time.RFC3339Nano))
	}
	if f.AggregateType != "" {
		parts = append(parts, "aggregate type "+f.AggregateType)
	}
	return strings.Join(parts, ", ")
}

// FilterSQL is how a backend writes the filter's conditions.
type FilterSQL struct {
	// Mark renders the placeholder of the n-th argument, from 1 ("$n" on
	// PostgreSQL); nil means "?".
	Mark func(n int) string
	// Like renders a case-insensitive LIKE of column against placeholder.
	Like func(column, placeholder string) string
	// Time converts a bound to the argument the backend compares
	// processed_at with; nil passes the time.Time.
	Time func(time.Time) any
}

// Where renders the filter's conditions, and "id > after" when after > 0,
// as "a AND b ..." (never empty: the status is required), with their
// arguments in order.
func (f RequeueFilter) Where(d FilterSQL, after int64) (string, []any) {
	var where []string
	var args []any
	mark := func(v any) string {
		args = append(args, v)
		if d.Mark == nil {
			return "?"
		}
		return d.Mark(len(args))
	}
	at := func(t time.Time) any {
		if d.Time == nil {
			return t
		}
		return d.Time(t)
	}
	where = append(where, "status = "+mark(string(f.Status)))
	if f.ErrorLike != "" {
		where = append(where, d.Like("last_error", mark(f.ErrorLike)))
	}
	if !f.Since.IsZero() {
		where = append(where, "processed_at >= "+mark(at(f.Since)))
	}
	if !f.Until.IsZero() {
		where = append(where, "processed_at < "+mark(at(f.Until)))
	}
	if f.AggregateType != "" {
		where = append(where, "aggregate_type = "+mark(f.AggregateType))
	}
	if after > 0 {
		where = append(where, "id > "+mark(after))
	}
	return strings.Join(where, " AND "), args
}

// RequeuePages is RequeueMatching for backends: page returns up to limit
// matching events with an id above after, in id order; each is requeued
// with requeue (the backend's audited Store.Requeue), with a reason that
// names the filter. An event that changed in between (another operator, a
// relay) is skipped. It returns how many events it requeued.
func RequeuePages(ctx context.Context, f RequeueFilter, a OperatorAction,
	page func(after int64, limit int) ([]MatchedEvent, error), requeue func(context.Context, OperatorAction) error) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	reason := "bulk retry (" + f.String() + ")"
	if a.Reason != "" {
		reason = a.Reason + "; " + reason
	}
	var n, after int64
	for {
		rows, err := page(after, RequeuePageSize)
		if err != nil {
			return n, fmt.Errorf("requeue matching: %w", err)
		}
		for _, r := range rows {
			one := a
			one.EventID, one.Reason = r.EventID, reason
			switch err := requeue(ctx, one); {
			case err == nil:
				n++
			case errors.Is(err, outbox.ErrConflict), errors.Is(err, outbox.ErrNotFound):
				// changed or purged since the page was read
			default:
				return n, fmt.Errorf("requeue matching: event %s (%d requeued so far): %w", r.EventID, n, err)
			}
			after = r.ID
		}
		if len(rows) < RequeuePageSize {
			return n, nil
		}
	}
}
