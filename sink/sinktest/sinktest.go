// Package sinktest is the conformance suite every sink runs:
//
//	sinktest.Run(t, sinktest.Features{...}, newHarness)
//
// A sink declares the features it claims (order per key, broker-side
// deduplication, surviving a broker restart) and the suite checks exactly
// those, plus the contract every sink keeps: a published batch is
// delivered, event id and headers are preserved, the trace context
// (traceparent, tracestate) arrives, a cancelled context returns errors,
// Close flushes and a publish after it fails, a deadline that passed means
// nothing is sent, a partial failure is reported per message, the sink
// names each message's route (sink.Destinations) and reports its health
// (sink.Health), a destination computed from bad event data is refused
// for good (Harness.InvalidAggregateTypes), and a sink whose destination
// is down at start is made without error and fails retryably
// (Harness.Unreachable), and records a receipt for each answered message
// exactly when it declares receipts (Features.Receipts).
package sinktest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

// Features are what a sink claims beyond the common contract.
type Features struct {
	// OrderedPerKey: messages of one ordering key arrive in publish order.
	OrderedPerKey bool
	// BrokerDedup: the destination drops a second message with the same
	// event id (JetStream's Nats-Msg-Id window, for example).
	BrokerDedup bool
	// Receipts is the kind of receipt (sink.Receipt.Kind) the sink records
	// for each message its destination answered; empty: it records none.
	Receipts string
}

// Received is one message as it arrived at the destination.
type Received struct {
	EventID       string
	AggregateType string
	AggregateID   string
	EventType     string
	// Headers are the event's own headers as they arrived (the outbox-*
	// headers may be present too; the suite ignores them here).
	Headers map[string]string
	Payload []byte
	// Destination is the topic, subject, routing key, stream or URL path.
	Destination string
}

// Harness adapts one sink to the suite. Every function may be called from
// the test goroutine only.
type Harness struct {
	// Sink under test, ready to publish.
	Sink sink.Sink
	// Read waits until at least n messages arrived in total (since the
	// harness was made) or ctx ends, and returns everything that arrived
	// by then (all the destination holds at the time of the call), in
	// arrival order, with ctx's error if it ended first.
	Read func(ctx context.Context, n int) ([]Received, error)
	// Poison turns m into a message the destination refuses for good (a
	// server answering 400, a message over the broker's size limit, an
	// invalid subject). Nil if the sink cannot be made to refuse one.
	Poison func(m outbox.Message) outbox.Message
	// Restart stops the broker and starts it again, returning once it
	// accepts connections. Nil if the sink has no broker to restart.
	Restart func(ctx context.Context) error
	// Timeout bounds each wait; default 30s.
	Timeout time.Duration

	// RouteOf returns the route a message that arrived as r was sent to,
	// as the sink's Destination names it (e.g. "exchange/" + r.Destination
	// for AMQP). Nil: r.Destination itself.
	RouteOf func(r Received) string
	// InvalidAggregateTypes are aggregate types for which the sink's
	// route gives a destination it must refuse (a NATS wildcard, an
	// illegal Kafka topic). Empty if every aggregate type is valid.
	InvalidAggregateTypes []string
	// Unreachable returns a sink of the same kind, with the same
	// settings, whose destination does not answer (nothing listens on
	// its port). Nil if the sink has no destination to be down.
	Unreachable func(t *testing.T) sink.Sink
}

// Run runs the suite. newHarness is called once per test and must give a
// harness whose destination is empty (its own topic, stream, queue or server).
func Run(t *testing.T, f Features, newHarness func(t *testing.T) *Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
		skip string
	}{
		{"BatchDelivered", testBatchDelivered, ""},
		{"EventIDAndHeadersPreserved", testHeaders, ""},
		{"OrderPerKey", testOrder, map[bool]string{true: "", false: "the sink does not claim order per key"}[f.OrderedPerKey]},
		{"CancelledContext", testCancelled, ""},
		{"DeadlinePassedNotSent", testDeadline, ""},
		{"CloseFlushesThenRefuses", testClose, ""},
		{"PartialFailurePerMessage", testPartial, ""},
		{"BrokerDedup", testDedup, map[bool]string{true: "", false: "the sink does not claim broker-side deduplication"}[f.BrokerDedup]},
		{"ReconnectAfterRestart", testRestart, ""},
		{"TraceContextCarried", testTraceContext, ""},
		{"DestinationAndHealth", testDestination, ""},
		{"InvalidDestinationPermanent", testInvalidDestination, ""},
		{"UnreachableAtStartRetryable", testUnreachable, ""},
		{"Receipts", testReceipts(f.Receipts), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skip != "" {
				t.Skip(tc.skip)
			}
			runOne(t, tc.fn, newHarness)
		})
	}
}

// RunRestart runs only the restart test (ReconnectAfterRestart), for a
// sink whose restartable broker costs too much to start for every test of
// Run: run the suite with Harness.Restart nil on a shared broker, and this
// on a private one that the harness restarts.
func RunRestart(t *testing.T, newHarness func(t *testing.T) *Harness) {
	t.Run("ReconnectAfterRestart", func(t *testing.T) { runOne(t, testRestart, newHarness) })
}

func runOne(t *testing.T, fn func(*testing.T, *Harness), newHarness func(t *testing.T) *Harness) {
	h := newHarness(t)
	if h.Timeout == 0 {
		h.Timeout = 30 * time.Second
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Sink.Close(ctx)
	})
	fn(t, h)
}

var seq atomic.Int64

// Message returns a valid message of aggregate payment/<key>; n is carried
// in the payload so order can be checked.
func Message(key string, n int) outbox.Message {
	n64 := seq.Add(1)
	return outbox.Message{
		ID:            n64,
		EventID:       outbox.NewEventID(),
		AggregateType: "payment",
		AggregateID:   key,
		EventType:     "ApprovalRequested",
		Payload:       json.RawMessage(fmt.Sprintf(`{"key":%q,"n":%d,"amount":1000}`, key, n)),
		Headers:       map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", n64, n64)},
		Attempt:       1,
		CreatedAt:     time.Now().UTC(),
	}
}

func publishOK(t *testing.T, h *Harness, msgs []outbox.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	res := h.Sink.Publish(ctx, msgs)
	if len(res) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(res), len(msgs))
	}
	for i, err := range res {
		if err != nil {
			t.Fatalf("Publish result %d: %v", i, err)
		}
	}
}

func read(t *testing.T, h *Harness, n int) []Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	got, err := h.Read(ctx, n)
	if err != nil && len(got) < n {
		t.Fatalf("waiting for %d messages: got %d: %v", n, len(got), err)
	}
	return got
}

func byID(rs []Received) map[string][]Received {
	m := map[string][]Received{}
	for _, r := range rs {
		m[r.EventID] = append(m[r.EventID], r)
	}
	return m
}

func testBatchDelivered(t *testing.T, h *Harness) {
	var msgs []outbox.Message
	for i := 0; i < 30; i++ {
		msgs = append(msgs, Message(fmt.Sprintf("k%d", i%5), i/5))
	}
	publishOK(t, h, msgs)
	got := byID(read(t, h, len(msgs)))
	for _, m := range msgs {
		rs := got[m.EventID.String()]
		if len(rs) == 0 {
			t.Fatalf("event %s was acknowledged but never arrived", m.EventID)
		}
		var want, have any
		_ = json.Unmarshal(m.Payload, &want)
		if err := json.Unmarshal(rs[0].Payload, &have); err != nil || fmt.Sprint(want) != fmt.Sprint(have) {
			t.Fatalf("payload arrived as %s, want %s", rs[0].Payload, m.Payload)
		}
	}
}

func testHeaders(t *testing.T, h *Harness) {
	m := Message("hdr", 0)
	m.AggregateType = "merchant"
	m.EventType = "MerchantUpdated"
	m.Headers["X-Correlation-Id"] = "corr-42"
	publishOK(t, h, []outbox.Message{m})
	rs := byID(read(t, h, 1))[m.EventID.String()]
	if len(rs) != 1 {
		t.Fatalf("event arrived %d times, want once (ids seen: %v)", len(rs), rs)
	}
	r := rs[0]
	if r.AggregateType != "merchant" || r.AggregateID != "hdr" || r.EventType != "MerchantUpdated" {
		t.Errorf("arrived with aggregate %s/%s type %s", r.AggregateType, r.AggregateID, r.EventType)
	}
	for k, v := range m.Headers {
		if got := lookup(r.Headers, k); got != v {
			t.Errorf("header %s arrived as %q, want %q (headers %v)", k, got, v, r.Headers)
		}
	}
}

// lookup finds a header case-insensitively.
func lookup(h map[string]string, k string) string {
	for hk, v := range h {
		if strings.EqualFold(hk, k) {
			return v
		}
	}
	return ""
}

func testOrder(t *testing.T, h *Harness) {
	const keys, per, calls = 8, 24, 4
	var all []outbox.Message
	for c := 0; c < calls; c++ {
		var msgs []outbox.Message
		for i := 0; i < per/calls; i++ {
			for k := 0; k < keys; k++ {
				msgs = append(msgs, Message(fmt.Sprintf("ord%d", k), c*(per/calls)+i))
			}
		}
		publishOK(t, h, msgs)
		all = append(all, msgs...)
	}
	got := read(t, h, len(all))
	next := map[string]int{}
	seen := map[string]bool{}
	for _, r := range got {
		if seen[r.EventID] {
			continue
		}
		seen[r.EventID] = true
		var p struct {
			Key string
			N   int
		}
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			t.Fatalf("payload %s: %v", r.Payload, err)
		}
		if p.N != next[p.Key] {
			t.Fatalf("key %s: message %d arrived when %d was expected", p.Key, p.N, next[p.Key])
		}
		next[p.Key]++
	}
	if len(seen) != len(all) {
		t.Fatalf("%d of %d messages arrived", len(seen), len(all))
	}
}

func testCancelled(t *testing.T, h *Harness) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msgs := []outbox.Message{Message("c", 0), Message("c", 1), Message("d", 0)}
	res := h.Sink.Publish(ctx, msgs)
	if len(res) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(res), len(msgs))
	}
	for i, err := range res {
		if err == nil {
			t.Errorf("message %d reported delivered under a cancelled context", i)
		}
	}
	// A fresh publish still works afterwards.
	m := Message("after-cancel", 0)
	publishOK(t, h, []outbox.Message{m})
	if got := byID(read(t, h, 1)); len(got[m.EventID.String()]) != 1 {
		t.Fatalf("the message published after the cancelled call did not arrive once: %v", got)
	}
}

func testDeadline(t *testing.T, h *Harness) {
	expired := Message("late", 0)
	expired.Deadline = time.Now().Add(-time.Second)
	res := h.Sink.Publish(context.Background(), []outbox.Message{expired})
	if len(res) != 1 || res[0] == nil {
		t.Fatalf("a message past its deadline was reported delivered: %v", res)
	}
	marker := Message("marker", 0)
	publishOK(t, h, []outbox.Message{marker})
	got := byID(read(t, h, 1))
	if len(got[expired.EventID.String()]) != 0 {
		t.Fatal("a message past its deadline arrived")
	}
	if len(got[marker.EventID.String()]) != 1 {
		t.Fatal("the marker did not arrive")
	}
}

func testClose(t *testing.T, h *Harness) {
	var msgs []outbox.Message
	for i := 0; i < 10; i++ {
		msgs = append(msgs, Message("close", i))
	}
	publishOK(t, h, msgs)
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	if err := h.Sink.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	got := byID(read(t, h, len(msgs)))
	for _, m := range msgs {
		if len(got[m.EventID.String()]) == 0 {
			t.Fatalf("acknowledged message %s missing after Close", m.EventID)
		}
	}
	res := h.Sink.Publish(context.Background(), []outbox.Message{Message("close", 99)})
	if len(res) != 1 || !errors.Is(res[0], outbox.ErrClosed) {
		t.Fatalf("Publish after Close = %v, want outbox.ErrClosed", res)
	}
}

func testPartial(t *testing.T, h *Harness) {
	if h.Poison == nil {
		t.Skip("the harness cannot make the destination refuse a message")
	}
	ok1 := Message("p1", 0)
	bad := h.Poison(Message("p2", 0))
	after := Message("p2", 1)
	ok3 := Message("p3", 0)
	msgs := []outbox.Message{ok1, bad, after, ok3}
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	res := h.Sink.Publish(ctx, msgs)
	if len(res) != 4 {
		t.Fatalf("Publish returned %d results for 4 messages", len(res))
	}
	if res[0] != nil || res[3] != nil {
		t.Fatalf("good messages of other keys failed: %v, %v", res[0], res[3])
	}
	if res[1] == nil || !outbox.IsPermanent(res[1]) {
		t.Fatalf("refused message: %v, want a permanent error", res[1])
	}
	if res[2] == nil {
		t.Fatalf("the message after a refused one of the same key was reported delivered")
	}
	got := byID(read(t, h, 2))
	if len(got[ok1.EventID.String()]) != 1 || len(got[ok3.EventID.String()]) != 1 {
		t.Fatalf("good messages did not arrive: %v", got)
	}
	if len(got[bad.EventID.String()]) != 0 {
		t.Fatal("the refused message arrived")
	}
	if len(got[after.EventID.String()]) != 0 && !errors.Is(res[2], outbox.ErrNotAttempted) {
		// Some brokers may deliver it despite the error; the relay then
		// retries it. It must not be reported as not attempted.
		t.Logf("the follower of the refused message arrived and was reported %v", res[2])
	}
	if errors.Is(res[2], outbox.ErrNotAttempted) && len(got[after.EventID.String()]) != 0 {
		t.Fatal("a message reported as not attempted arrived")
	}
}

func testDedup(t *testing.T, h *Harness) {
	m := Message("dup", 0)
	publishOK(t, h, []outbox.Message{m})
	publishOK(t, h, []outbox.Message{m})
	marker := Message("dup-marker", 0)
	publishOK(t, h, []outbox.Message{marker})
	got := byID(read(t, h, 2))
	if n := len(got[m.EventID.String()]); n != 1 {
		t.Fatalf("a message published twice arrived %d times; the broker should drop the repeat", n)
	}
}

func testRestart(t *testing.T, h *Harness) {
	if h.Restart == nil {
		t.Skip("no broker to restart")
	}
	var before, after []outbox.Message
	for i := 0; i < 10; i++ {
		before = append(before, Message("rs", i))
		after = append(after, Message("rs", 10+i))
	}
	publishOK(t, h, before)
	restartCtx, cancelRestart := context.WithTimeout(context.Background(), 2*h.Timeout)
	defer cancelRestart()
	began := time.Now()
	if err := h.Restart(restartCtx); err != nil {
		t.Fatalf("restart the broker: %v", err)
	}
	restarted := time.Since(began)
	// Retry what fails while the sink reconnects, as the relay would. The
	// recovery has a budget of its own, so that a slow restart (a private
	// RabbitMQ node on a busy machine) does not eat into the time the sink
	// has to recover.
	ctx, cancel := context.WithTimeout(context.Background(), 2*h.Timeout)
	defer cancel()
	pending := after
	var lastErr error
	for len(pending) > 0 {
		if ctx.Err() != nil {
			t.Fatalf("the sink did not recover within %s after the broker restart (which took %s): %d messages still failing, the last with: %v",
				2*h.Timeout, restarted.Round(time.Millisecond), len(pending), lastErr)
		}
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		res := h.Sink.Publish(pctx, pending)
		pcancel()
		var retry []outbox.Message
		for i, err := range res {
			if err != nil {
				if outbox.IsPermanent(err) {
					t.Fatalf("after a restart, a publish failed permanently: %v", err)
				}
				lastErr = err
				retry = append(retry, pending[i])
			}
		}
		if len(retry) > 0 {
			waitABit(ctx)
		}
		pending = retry
	}
	t.Logf("the broker restart took %s; the sink published again %s later", restarted.Round(time.Millisecond), (time.Since(began) - restarted).Round(time.Millisecond))
	// Messages acknowledged before the restart may be gone (a broker that
	// keeps nothing on disk); every one acknowledged after it must arrive.
	missing := waitForIDs(t, h, after)
	if len(missing) > 0 {
		t.Fatalf("%d messages acknowledged after the restart never arrived: %v", len(missing), missing)
	}
}

// waitForIDs reads until every message of want has arrived or the timeout
// passes, and returns the ids still missing.
func waitForIDs(t *testing.T, h *Harness, want []outbox.Message) []string {
	t.Helper()
	deadline := time.Now().Add(h.Timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		got, _ := h.Read(ctx, 1<<30) // returns what arrived when ctx ends
		cancel()
		seen := byID(got)
		var missing []string
		for _, m := range want {
			if len(seen[m.EventID.String()]) == 0 {
				missing = append(missing, m.EventID.String())
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			sort.Strings(missing)
			return missing
		}
	}
}

// waitABit pauses between publish retries, like the relay's backoff.
func waitABit(ctx context.Context) {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
