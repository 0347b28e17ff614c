package outbox

import (
	"context"
	"errors"
)

// Writer inserts validated events in a caller's transaction of type TTx.
// Each backend provides one: *postgres.Store for pgx.Tx, postgres.SQLWriter
// for *sql.Tx, *sqlite.Store and *mysql.Store for *sql.Tx. Call [Enqueue]
// rather than WriteEvents directly: Enqueue validates and assigns ids first.
type Writer[TTx any] interface {
	// EnqueueLimits returns the size limits the writer enforces.
	EnqueueLimits() Limits
	// WriteEvents inserts events that Enqueue has validated and given ids,
	// in the caller's transaction, without committing.
	WriteEvents(ctx context.Context, tx TTx, events []Event) error
}

// ContextHeaders is implemented by writers that add headers taken from the
// caller's context to every event Enqueue writes: the W3C traceparent of
// the caller's span, for one (the tracing subpackage provides the hook
// that the backends' Config.ContextHeaders takes). Headers an event
// already has are kept.
type ContextHeaders interface {
	ContextHeaders(ctx context.Context, headers map[string]string)
}

// Enqueue validates events and inserts them in the caller's transaction tx,
// in order. It never commits or rolls back: the events exist if and only if
// the caller's transaction commits. Nothing is written unless every event is
// valid; the error then is an [*InvalidEventError] naming the first bad event
// and field.
//
// It returns the event ids in the order of events. Events with a zero ID get
// a new UUIDv7.
func Enqueue[TTx any](ctx context.Context, w Writer[TTx], tx TTx, events ...Event) ([]EventID, error) {
	if len(events) == 0 {
		return nil, nil
	}
	if w == nil {
		return nil, errors.New("outbox: Enqueue called with a nil writer")
	}
	if ch, ok := any(w).(ContextHeaders); ok {
		events = withContextHeaders(ctx, ch, events)
	}
	prepared, err := prepare(w.EnqueueLimits(), events)
	if err != nil {
		return nil, err
	}
	if err := w.WriteEvents(ctx, tx, prepared); err != nil {
		return nil, err
	}
	ids := make([]EventID, len(prepared))
	for i := range prepared {
		ids[i] = prepared[i].ID
	}
	return ids, nil
}

// withContextHeaders returns events with the context's headers added, on
// copies: the caller's events and header maps are left as they are. The
// context is read once for the whole call.
func withContextHeaders(ctx context.Context, ch ContextHeaders, events []Event) []Event {
	extra := map[string]string{}
	ch.ContextHeaders(ctx, extra)
	if len(extra) == 0 {
		return events
	}
	out := make([]Event, len(events))
	for i, e := range events {
		h := make(map[string]string, len(e.Headers)+len(extra))
		for k, v := range extra {
			h[k] = v
		}
		for k, v := range e.Headers { // the event's own win
			h[k] = v
		}
		e.Headers = h
		out[i] = e
	}
	return out
}

// prepare validates events against the limits and returns a copy in which
// every event has an ID: what [Enqueue] does before writing.
func prepare(l Limits, events []Event) ([]Event, error) {
	l = l.WithDefaults()
	out := make([]Event, len(events))
	seen := make(map[EventID]int, len(events))
	for i := range events {
		e := events[i]
		if err := e.validate(i, l); err != nil {
			return nil, err
		}
		if e.ID.IsZero() {
			e.ID = NewEventID()
		} else if j, dup := seen[e.ID]; dup {
			return nil, &InvalidEventError{Index: i, Field: "id", Reason: "repeats the id of event #" + itoa(j) + " in the same call"}
		}
		seen[e.ID] = i
		out[i] = e
	}
	return out, nil
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
