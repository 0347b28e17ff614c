package store

import (
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
