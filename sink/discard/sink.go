package discard

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

var _ sink.Sink = (*Sink)(nil)

// Sink counts and drops messages. The zero value is ready to use, and it is
// safe for concurrent use; do not copy it.
type Sink struct {
	count  atomic.Int64
	closed atomic.Bool
}

// New returns an empty sink.
func New() *Sink { return &Sink{} }

// Destination implements [sink.Destinations]: "discard" for every message.
func (s *Sink) Destination(*outbox.Message) string { return "discard" }

// Reachable implements [sink.Health]: always ok, there is nothing to reach.
func (s *Sink) Reachable() (ok bool, lastErr error, since time.Time) { return true, nil, time.Time{} }

// Publish counts the messages and returns one result per message: nil,
// unless ctx has ended or the message's Deadline has passed.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if s.closed.Load() {
		return sinkkit.Fill(len(msgs), outbox.ErrClosed)
	}
	results := make([]error, len(msgs))
	if err := ctx.Err(); err != nil {
		for i := range msgs {
			results[i] = fmt.Errorf("discard sink: event %s not taken: the publish context ended: %w: %w",
				msgs[i].EventID, err, outbox.ErrNotAttempted)
		}
		return results
	}
	now := time.Now()
	var stopped map[string]outbox.EventID // ordering key -> the event that failed; rare, so built lazily
	var n int64
	for i := range msgs {
		m := &msgs[i]
		if stopped != nil {
			if failed, ok := stopped[m.OrderingKey()]; ok {
				results[i] = fmt.Errorf("discard sink: event %s not taken: event %s of the same aggregate failed before it: %w",
					m.EventID, failed, outbox.ErrNotAttempted)
				continue
			}
		}
		if !m.Deadline.IsZero() && !now.Before(m.Deadline) {
			results[i] = fmt.Errorf("discard sink: event %s not taken: its deadline %s has passed: %w: %w",
				m.EventID, m.Deadline.Format(time.RFC3339Nano), context.DeadlineExceeded, outbox.ErrNotAttempted)
			if stopped == nil {
				stopped = make(map[string]outbox.EventID)
			}
			stopped[m.OrderingKey()] = m.EventID
			continue
		}
		n++
	}
	s.count.Add(n)
	return results
}

// Count returns how many messages the sink has taken so far.
func (s *Sink) Count() int64 { return s.count.Load() }

// Close makes every later Publish fail with [outbox.ErrClosed]. It never
// fails; calling it again does nothing.
func (s *Sink) Close(context.Context) error {
	s.closed.Store(true)
	return nil
}
