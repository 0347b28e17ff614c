package stdoutsink

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

var _ sink.Sink = (*Sink)(nil)

// Sink writes one JSON line per message. Create it with [New]; it is safe
// for concurrent use.
type Sink struct {
	w       io.Writer
	flusher interface{ Flush() error } // w, when it buffers
	closed  atomic.Bool
	// lock serializes writers: a mutex that a waiting Publish or Close can
	// give up on when its context ends. It guards buf and enc.
	lock chan struct{}
	buf  bytes.Buffer
	enc  *json.Encoder

	health *sinkkit.Reachability // down while writes fail
}

// New returns a sink for cfg.
func New(cfg Config) *Sink {
	w := cfg.Writer
	if w == nil {
		w = os.Stdout
	}
	s := &Sink{w: w, lock: make(chan struct{}, 1), health: sinkkit.NewReachability()}
	s.health.Up()
	s.flusher, _ = w.(interface{ Flush() error })
	s.enc = json.NewEncoder(&s.buf)
	s.enc.SetEscapeHTML(false)
	return s
}

// line is the JSON form of one message.
type line struct {
	ID            int64             `json:"id"`
	EventID       outbox.EventID    `json:"event_id"`
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id"`
	EventType     string            `json:"event_type"`
	Attempt       int               `json:"attempt"`
	CreatedAt     time.Time         `json:"created_at"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       json.RawMessage   `json:"payload"`
}

// Publish writes a line per message, in order, and returns one result per
// message. See the package documentation for what counts as delivered.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if s.closed.Load() {
		return sinkkit.Fill(len(msgs), outbox.ErrClosed)
	}
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		results := make([]error, len(msgs))
		for i := range msgs {
			results[i] = notSent(&msgs[i], ctx.Err())
		}
		return results
	}
	defer func() { <-s.lock }()
	if s.closed.Load() { // Close ran while this call waited
		return sinkkit.Fill(len(msgs), outbox.ErrClosed)
	}

	results := make([]error, len(msgs))
	var stopped map[string]outbox.EventID // ordering key -> the event that failed
	written := make([]int, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if failed, ok := stopped[m.OrderingKey()]; ok {
			results[i] = fmt.Errorf("stdout sink: event %s not written: event %s of the same aggregate failed before it: %w",
				m.EventID, failed, outbox.ErrNotAttempted)
			continue
		}
		err := s.write(ctx, m)
		if err == nil {
			written = append(written, i)
			continue
		}
		results[i] = err
		if stopped == nil {
			stopped = make(map[string]outbox.EventID)
		}
		stopped[m.OrderingKey()] = m.EventID
	}
	if s.flusher != nil && len(written) > 0 {
		if err := s.flusher.Flush(); err != nil {
			for _, i := range written {
				results[i] = outbox.Retryable(fmt.Errorf("stdout sink: event %s: flush: %w", msgs[i].EventID, err), 0)
			}
		}
	}
	return results
}

// write writes the line of m unless ctx or m's deadline forbids it.
func (s *Sink) write(ctx context.Context, m *outbox.Message) error {
	if err := ctx.Err(); err != nil {
		return notSent(m, err)
	}
	if !m.Deadline.IsZero() && !time.Now().Before(m.Deadline) {
		return fmt.Errorf("stdout sink: event %s not written: its deadline %s has passed: %w: %w",
			m.EventID, m.Deadline.Format(time.RFC3339Nano), context.DeadlineExceeded, outbox.ErrNotAttempted)
	}
	payload := m.Payload
	if len(payload) == 0 {
		payload = nil // written as null
	}
	s.buf.Reset()
	if err := s.enc.Encode(line{
		ID: m.ID, EventID: m.EventID, AggregateType: m.AggregateType, AggregateID: m.AggregateID,
		EventType: m.EventType, Attempt: m.Attempt, CreatedAt: m.CreatedAt.UTC(),
		Headers: m.Headers, Payload: payload,
	}); err != nil {
		return outbox.Permanent(fmt.Errorf("stdout sink: event %s: cannot encode it as JSON (is the payload valid JSON?): %w", m.EventID, err))
	}
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		err = outbox.Retryable(fmt.Errorf("stdout sink: event %s: write: %w", m.EventID, err), 0)
		s.health.Down(err)
		return err
	}
	s.health.Up()
	return nil
}

// Destination implements [sink.Destinations]: "stdout" for every message.
func (s *Sink) Destination(*outbox.Message) string { return "stdout" }

// Reachable implements [sink.Health]: ok unless the last write failed.
func (s *Sink) Reachable() (ok bool, lastErr error, since time.Time) { return s.health.Reachable() }

// notSent is the result of a message left unwritten because ctx ended.
func notSent(m *outbox.Message, ctxErr error) error {
	return fmt.Errorf("stdout sink: event %s not written: the publish context ended: %w: %w", m.EventID, ctxErr, outbox.ErrNotAttempted)
}

// Close makes every later Publish fail with [outbox.ErrClosed], waits for
// a Publish in progress (until ctx is done) and flushes a buffering writer.
// It does not close the writer. Calling it again does nothing.
func (s *Sink) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return nil
	}
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("stdout sink: close: a Publish is still writing: %w", ctx.Err())
	}
	defer func() { <-s.lock }()
	if s.flusher != nil {
		if err := s.flusher.Flush(); err != nil {
			return fmt.Errorf("stdout sink: close: flush: %w", err)
		}
	}
	return nil
}
