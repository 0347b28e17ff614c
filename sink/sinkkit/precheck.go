// Package sinkkit holds what a sink needs to keep the contract of
// [sink.Sink], for the sinks of this module and for third-party ones:
//
//   - the checks before a message is sent and the not-attempted errors they
//     give ([Precheck], [NotSentError], [Calls]), and sending by ordering
//     key ([Precheck.SendByKey]);
//   - the reading of sink URL options ([URLOptions], [RedactURL]);
//   - destination checks ([CheckName], [NewCheckedRouter]) and broker
//     headers ([BrokerHeaders]);
//   - the CloudEvents mapping ([CloudEventAttributes], [CloudEventJSON],
//     [Format]);
//   - the reachability state behind [sink.Health] ([Reachability]);
//   - per-route limits: [Limit] wraps any sink so that each route stays
//     within a rate (token bucket with burst) and a number of messages in
//     flight: over the limit, Publish waits (backpressure), and a message
//     whose deadline would pass while it waits is not sent.
//
// It imports no database driver and no broker client.
package sinkkit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

// Reasons a [NotSentError] gives for the common cases.
const (
	ReasonClosed       = "the sink is closed"
	ReasonContextEnded = "the publish context ended"
)

// NotSentError is the result of a message a sink did not send: the sink
// was closed, the publish context ended, the message's deadline passed, or
// an earlier message of its ordering key failed. It matches
// [outbox.ErrNotAttempted] and Cause, if any.
type NotSentError struct {
	Sink    string // names the sink, e.g. "kafka sink"
	EventID outbox.EventID
	Reason  string // why, e.g. [ReasonContextEnded]
	Cause   error  // nil, outbox.ErrClosed, a context error, ...
}

// Error reads "kafka sink: event ID not sent: reason: cause"; a Cause of
// outbox.ErrClosed is left out, the reason says it.
func (e *NotSentError) Error() string {
	msg := e.Sink + ": event " + e.EventID.String() + " not sent: " + e.Reason
	if e.Cause != nil && e.Cause != outbox.ErrClosed {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap makes errors.Is match the cause and outbox.ErrNotAttempted.
func (e *NotSentError) Unwrap() []error {
	if e.Cause == nil {
		return []error{outbox.ErrNotAttempted}
	}
	return []error{e.Cause, outbox.ErrNotAttempted}
}

// Precheck answers, for one sink, "may this message still be sent?", and
// builds the [NotSentError] of a message that may not. It holds no state
// of its own; the zero value of IsClosed means the sink does not check
// for Close message by message (it refuses the whole Publish call
// instead).
type Precheck struct {
	// Sink names the sink at the start of every error, e.g. "kafka sink".
	Sink string
	// IsClosed, when set, reports whether Close has begun: Check then
	// stops a message that has not started.
	IsClosed func() bool
}

// NotSent returns the result of m, not sent for reason (caused by cause,
// which may be nil).
func (p Precheck) NotSent(m *outbox.Message, reason string, cause error) error {
	return &NotSentError{Sink: p.Sink, EventID: m.EventID, Reason: reason, Cause: cause}
}

// All returns the results of a Publish call that sends nothing: every
// message not sent for the same reason, e.g. ([ReasonClosed],
// outbox.ErrClosed) or ([ReasonContextEnded], ctx.Err()).
func (p Precheck) All(msgs []outbox.Message, reason string, cause error) []error {
	out := make([]error, len(msgs))
	for i := range msgs {
		out[i] = p.NotSent(&msgs[i], reason, cause)
	}
	return out
}

// Enter registers a Publish call with calls. It returns nil when the call
// may go on, and must then call calls.Exit when it is done; or else the
// results of a call that sends nothing: every message not sent because
// the sink is closed, or because ctx has ended.
func (p Precheck) Enter(ctx context.Context, calls *Calls, msgs []outbox.Message) []error {
	if !calls.Enter() {
		return p.All(msgs, ReasonClosed, outbox.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		calls.Exit()
		return p.All(msgs, ReasonContextEnded, err)
	}
	return nil
}

// Behind returns the result of m, not sent because failed, an earlier
// message of its ordering key in the same call, did not succeed. cause,
// if not nil, is what the client said of m itself.
func (p Precheck) Behind(m, failed *outbox.Message, cause error) error {
	return p.NotSent(m, "event "+failed.EventID.String()+" of the same aggregate failed before it", cause)
}

// Check returns nil if m may be sent now, or the error that says why not,
// the first of: ctx has ended; the sink is closed (when IsClosed is set);
// failed, an earlier message of m's ordering key, did not succeed (nil:
// none did); m's deadline is not after now.
func (p Precheck) Check(ctx context.Context, m, failed *outbox.Message, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return p.NotSent(m, ReasonContextEnded, err)
	}
	if p.IsClosed != nil && p.IsClosed() {
		return p.NotSent(m, ReasonClosed, outbox.ErrClosed)
	}
	if failed != nil {
		return p.Behind(m, failed, nil)
	}
	return p.Expired(m, now)
}

// Expired returns the result of m if its deadline is set and not after
// now (a message must not be sent after its deadline), or nil.
func (p Precheck) Expired(m *outbox.Message, now time.Time) error {
	if !m.Deadline.IsZero() && !now.Before(m.Deadline) {
		return p.NotSent(m, "its deadline "+m.Deadline.Format(time.RFC3339Nano)+" has passed", context.DeadlineExceeded)
	}
	return nil
}

// SendByKey returns one result per message, sending msgs[i] with send(i):
// the messages of one ordering key one after another in the given order,
// each after the previous one's send returned nil; different keys
// concurrently, on at most workers goroutines (0: one per key). Once a
// message fails, the later ones of its key are not sent: their result is
// Check's with the failed message, so a context that ended or a Close
// (with IsClosed) takes precedence over the failure. The result of each
// message sent is reported at once with sink.ReportResult.
func (p Precheck) SendByKey(ctx context.Context, msgs []outbox.Message, workers int, send func(i int) error) []error {
	results := make([]error, len(msgs))
	heads, next := KeyChains(msgs)
	chain := func(head int) {
		for i := head; i >= 0; i = next[i] {
			results[i] = send(i)
			sink.ReportResult(ctx, &msgs[i], results[i])
			if results[i] == nil {
				continue
			}
			for j := next[i]; j >= 0; j = next[j] {
				results[j] = p.Check(ctx, &msgs[j], &msgs[i], time.Now())
			}
			return
		}
	}
	if workers <= 0 || workers > len(heads) {
		workers = len(heads)
	}
	if workers <= 1 {
		for _, h := range heads {
			chain(h)
		}
		return results
	}
	var taken atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(taken.Add(1) - 1)
				if i >= len(heads) {
					return
				}
				chain(heads[i])
			}
		})
	}
	wg.Wait()
	return results
}

// KeyChains links the messages of each ordering key: heads are the first
// message of each key, in order of appearance, and next[i] is the next
// message with the key of msgs[i], or -1.
func KeyChains(msgs []outbox.Message) (heads, next []int) {
	next = make([]int, len(msgs))
	last := make(map[string]int, len(msgs))
	for i := range msgs {
		next[i] = -1
		k := msgs[i].OrderingKey()
		if j, ok := last[k]; ok {
			next[j] = i
		} else {
			heads = append(heads, i)
		}
		last[k] = i
	}
	return heads, next
}

// Calls tracks a sink's Publish calls in progress, so that Close can
// refuse new ones and wait for those already running. The zero value is
// open; do not copy it.
type Calls struct {
	mu       sync.RWMutex
	closed   bool
	inflight sync.WaitGroup
}

// Enter registers a Publish call and returns true, or returns false once
// Close has been called. A call that entered must call Exit when it is
// done.
func (c *Calls) Enter() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false
	}
	c.inflight.Add(1)
	return true
}

// Exit ends a call that entered.
func (c *Calls) Exit() { c.inflight.Done() }

// Close makes every later Enter return false. It reports whether this was
// the first Close.
func (c *Calls) Close() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := !c.closed
	c.closed = true
	return first
}

// Wait waits, after Close, for the calls in progress to exit, or for ctx
// to end: then it returns ctx.Err().
func (c *Calls) Wait(ctx context.Context) error {
	idle := make(chan struct{})
	go func() { c.inflight.Wait(); close(idle) }()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
