package outbox

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalidEvent is matched (errors.Is) by every validation failure of
	// an [Event]. The concrete error is an [*InvalidEventError].
	ErrInvalidEvent = errors.New("outbox: invalid event")

	// ErrInvalidConfig is matched by configuration errors: a bad table name,
	// a negative duration, an unknown option.
	ErrInvalidConfig = errors.New("outbox: invalid configuration")

	// ErrClosed is returned by a sink or store used after Close.
	ErrClosed = errors.New("outbox: closed")

	// ErrNotAttempted is the result a sink reports for a message it did not
	// try to deliver, typically because an earlier message with the same
	// ordering key failed in the same batch. The relay returns such events to
	// PENDING without counting a retry.
	ErrNotAttempted = errors.New("outbox: not attempted")

	// ErrNotFound is returned when an event looked up by id does not exist.
	ErrNotFound = errors.New("outbox: event not found")

	// ErrConflict is returned when an operator action does not apply to the
	// event's current status, e.g. requeueing a PROCESSED event.
	ErrConflict = errors.New("outbox: event is not in a state that allows this")
)

// InvalidEventError says which event (by position in the call) and which
// field failed validation, and why. It matches [ErrInvalidEvent].
type InvalidEventError struct {
	Index  int    // position of the event in the Enqueue call, from 0
	Field  string // e.g. "payload", "aggregate_id", "headers"
	Reason string // what is wrong and how to fix it
}

func (e *InvalidEventError) Error() string {
	return fmt.Sprintf("outbox: invalid event #%d: %s: %s", e.Index, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidEvent) true.
func (e *InvalidEventError) Unwrap() error { return ErrInvalidEvent }

// PublishError classifies a sink failure. A sink returns it (possibly
// wrapped) to tell the relay whether retrying can help. Errors of any other
// type are treated as retryable.
type PublishError struct {
	Err        error
	Retryable  bool
	RetryAfter time.Duration // a server-requested delay (HTTP Retry-After), 0 if none
}

func (e *PublishError) Error() string {
	kind := "permanent"
	if e.Retryable {
		kind = "retryable"
	}
	if e.Err == nil {
		return "outbox: " + kind + " publish error"
	}
	return e.Err.Error() + " (" + kind + ")"
}

func (e *PublishError) Unwrap() error { return e.Err }

// Permanent marks err as a failure that retrying cannot fix (HTTP 400, a
// message too large for the broker). The relay fails the event at once.
func Permanent(err error) error { return &PublishError{Err: err, Retryable: false} }

// Retryable marks err as transient. after, when positive, is the delay the
// remote asked for before the next attempt.
func Retryable(err error, after time.Duration) error {
	return &PublishError{Err: err, Retryable: true, RetryAfter: after}
}

// IsPermanent reports whether err was classified as permanent by a sink.
func IsPermanent(err error) bool {
	var pe *PublishError
	return errors.As(err, &pe) && !pe.Retryable
}

// RetryAfter returns the delay a sink asked for, or 0.
func RetryAfter(err error) time.Duration {
	var pe *PublishError
	if errors.As(err, &pe) && pe.Retryable {
		return pe.RetryAfter
	}
	return 0
}
