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
