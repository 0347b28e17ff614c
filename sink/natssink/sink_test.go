package natssink_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/testenv/wait"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/natssink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newSink(t *testing.T, cfg natssink.Config) *natssink.Sink {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := natssink.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

func publish(t *testing.T, s *natssink.Sink, msgs ...outbox.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := s.Publish(ctx, msgs)
	if len(res) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(res), len(msgs))
	}
	return res
}

func mustPublish(t *testing.T, s *natssink.Sink, msgs ...outbox.Message) {
	t.Helper()
	for i, err := range publish(t, s, msgs...) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

func typed(m outbox.Message, aggType string) outbox.Message {
	m.AggregateType = aggType
	return m
}

func streamInfo(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return st.CachedInfo()
}

// A stream that already captures a subject is used as it is; the sink
// creates its own stream only for a subject no stream captures, and falls
// back to the subject alone when its configured subjects overlap another
// stream; an override subject outside them is added to it.
func TestStreamLookupCreateAndExtend(t *testing.T) {
	url := sharedURL(t)
	_, js := jsClient(t, url)
	id := uniq()
	existing, own := "X"+id, "O"+id
	t.Cleanup(func() { deleteStream(t, url, existing); deleteStream(t, url, own) })
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: existing, Subjects: []string{"u" + id + ".payment.events"}}); err != nil {
		t.Fatal(err)
	}
	cfg := natssink.Config{URL: url, Route: "u" + id + ".{aggregate_type}.events", Stream: own, StreamSubjects: []string{"u" + id + ".*.events"}}
	s := newSink(t, cfg)

	mustPublish(t, s, sinktest.Message("a", 0))
	if n := streamInfo(t, js, existing).State.Msgs; n != 1 {
		t.Fatalf("stream %s holds %d messages, want the payment event", existing, n)
	}
	if _, err := js.Stream(context.Background(), own); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the sink created stream %s although %s captures the subject (lookup: %v)", own, existing, err)
	}

	mustPublish(t, s, typed(sinktest.Message("b", 0), "merchant"))
	info := streamInfo(t, js, own)
	if want := []string{"u" + id + ".merchant.events"}; !slices.Equal(info.Config.Subjects, want) {
		t.Fatalf("created stream %s on %v, want %v (its configured subjects overlap %s)", own, info.Config.Subjects, want, existing)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream %s holds %d messages, want 1", own, info.State.Msgs)
	}

	cfg.RouteOverrides = map[string]string{"merchant": "u" + id + ".merchant.audit"}
	s2 := newSink(t, cfg)
	mustPublish(t, s2, typed(sinktest.Message("c", 0), "merchant"))
	info = streamInfo(t, js, own)
	if !slices.Contains(info.Config.Subjects, "u"+id+".merchant.audit") || info.State.Msgs != 2 {
		t.Fatalf("stream %s: subjects %v, %d messages; want merchant.audit added and 2 messages", own, info.Config.Subjects, info.State.Msgs)
	}
}

func TestNoCreateStreamIsPermanent(t *testing.T) {
	url := sharedURL(t)
	id := uniq()
	s := newSink(t, natssink.Config{URL: url, Route: "n" + id + ".{aggregate_type}.events", Stream: "N" + id, NoCreateStream: true})
	res := publish(t, s, sinktest.Message("a", 0), sinktest.Message("a", 1))
	if !outbox.IsPermanent(res[0]) || !strings.Contains(res[0].Error(), "no JetStream stream captures subject n"+id+".payment.events") {
		t.Fatalf("publish with no stream and creation off: %v, want a permanent error naming the subject", res[0])
	}
	if !errors.Is(res[1], outbox.ErrNotAttempted) {
		t.Fatalf("the next event of the aggregate: %v, want not attempted", res[1])
	}
	_, js := jsClient(t, url)
	if _, err := js.Stream(context.Background(), "N"+id); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream created although creation is off: %v", err)
	}
}

// An aggregate id that makes an invalid subject fails that event for
// good; its aggregate's later events are not sent; other aggregates go on.
func TestInvalidSubjectIsPermanent(t *testing.T) {
	url := sharedURL(t)
	id := uniq()
	stream := "I" + id
	t.Cleanup(func() { deleteStream(t, url, stream) })
	s := newSink(t, natssink.Config{URL: url, Route: "i" + id + ".x.{aggregate_id}", Stream: stream, StreamSubjects: []string{"i" + id + ".x.>"}})
	for _, bad := range []string{"has space", "wild.*", "trailing.", "a..b"} {
		res := publish(t, s, sinktest.Message(bad, 0), sinktest.Message(bad, 1), sinktest.Message("good", 0))
		if !outbox.IsPermanent(res[0]) || !strings.Contains(res[0].Error(), "invalid subject") {
			t.Errorf("aggregate %q: %v, want a permanent invalid-subject error", bad, res[0])
		}
		if !errors.Is(res[1], outbox.ErrNotAttempted) {
			t.Errorf("aggregate %q, second event: %v, want not attempted", bad, res[1])
		}
		if res[2] != nil {
			t.Errorf("another aggregate failed: %v", res[2])
		}
	}
}

// A stream that is full and discards new messages, or whose message size
// limit is exceeded, refuses for good; the aggregate's later events are
// not sent, so nothing is stored out of order.
func TestStreamLimitsArePermanent(t *testing.T) {
	url := sharedURL(t)
	_, js := jsClient(t, url)
	id := uniq()
	full, small := "F"+id, "S"+id
	t.Cleanup(func() { deleteStream(t, url, full); deleteStream(t, url, small) })
	ctx := context.Background()
	// Three tokens at least, so that no stream another test left on a
	// two-token pattern (*.events) overlaps them.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: full, Subjects: []string{"f" + id + ".x.>"}, MaxMsgs: 2, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: small, Subjects: []string{"s" + id + ".x.>"}, MaxMsgSize: 512}); err != nil {
		t.Fatal(err)
	}

	s := newSink(t, natssink.Config{URL: url, Route: "f" + id + ".x.{aggregate_type}", NoCreateStream: true})
	res := publish(t, s, sinktest.Message("k", 0), sinktest.Message("k", 1), sinktest.Message("k", 2), sinktest.Message("k", 3))
	if res[0] != nil || res[1] != nil {
		t.Fatalf("first two events: %v, %v", res[0], res[1])
	}
	if !outbox.IsPermanent(res[2]) || !strings.Contains(res[2].Error(), "maximum messages") {
		t.Fatalf("event into a full discard-new stream: %v, want permanent 'maximum messages exceeded'", res[2])
	}
	if !errors.Is(res[3], outbox.ErrNotAttempted) {
		t.Fatalf("the event after it: %v, want not attempted", res[3])
	}
	if n := streamInfo(t, js, full).State.Msgs; n != 2 {
		t.Fatalf("stream %s holds %d messages, want 2", full, n)
	}

	s2 := newSink(t, natssink.Config{URL: url, Route: "s" + id + ".x.{aggregate_type}", NoCreateStream: true})
	big := sinktest.Message("k", 0)
	big.Payload = bigPayload(1024)
	res = publish(t, s2, big, sinktest.Message("k", 1), sinktest.Message("other", 0))
	if !outbox.IsPermanent(res[0]) || !strings.Contains(res[0].Error(), "max_msg_size") {
		t.Fatalf("event over the stream's max_msg_size: %v, want permanent", res[0])
	}
	if !errors.Is(res[1], outbox.ErrNotAttempted) || res[2] != nil {
		t.Fatalf("after the refused event: same aggregate %v (want not attempted), other aggregate %v (want nil)", res[1], res[2])
	}
}

// While the server is down, publishes fail retryably, never permanently,
// and the later events of an aggregate are not sent.
func TestServerDownIsRetryable(t *testing.T) {
	e := startPrivate(t)
	s := newSink(t, natssink.Config{URL: e.URL, Route: "d.{aggregate_type}", StreamSubjects: []string{"d.>"},
		PublishTimeout: 300 * time.Millisecond, ReconnectWait: 20 * time.Millisecond})
	// The first publish creates the stream, within the short timeout the
	// down server needs: on a busy machine that can take longer than
	// 300 ms, so it is tried again until it is in.
	wait.Until(t, time.Minute, "a first publish while the server is up", func() (bool, error) {
		return publish(t, s, sinktest.Message("a", 0))[0] == nil, nil
	})
	e.stop()
	res := publish(t, s, sinktest.Message("a", 1), sinktest.Message("a", 2), sinktest.Message("b", 0))
	t.Log(res)
	for i, err := range res {
		if err == nil || outbox.IsPermanent(err) {
			t.Fatalf("result %d with the server down: %v, want a retryable error", i, err)
		}
	}
	if !errors.Is(res[1], outbox.ErrNotAttempted) {
		t.Fatalf("second event of the aggregate: %v, want not attempted", res[1])
	}
	if errors.Is(res[0], outbox.ErrNotAttempted) {
		t.Fatalf("the first event was attempted, yet reported %v", res[0])
	}
}

// New succeeds with no server: publishes fail at once, retryably, naming
// the server without its password; Reachable says the server is down;
// once a server listens there, the sink connects on its own.
func TestNewWithoutServerConnectsLater(t *testing.T) {
	e := startPrivate(t)
	url := e.URL
	e.stop()
	s := newSink(t, natssink.Config{URL: strings.Replace(url, "nats://", "nats://bob:s3cret@", 1),
		ConnectTimeout: time.Second, ReconnectWait: 20 * time.Millisecond})
	start := time.Now()
	res := publish(t, s, sinktest.Message("a", 0), sinktest.Message("a", 1))
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a publish with no server took %s: it should fail at once", took)
	}
	for i, err := range res {
		if err == nil || outbox.IsPermanent(err) {
			t.Fatalf("result %d with no server: %v, want retryable", i, err)
		}
		if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "not connected") {
			t.Fatalf("error %q must say the sink is not connected, without the password", err)
		}
	}
	if ok, lastErr, _ := s.Reachable(); ok || lastErr == nil || strings.Contains(lastErr.Error(), "s3cret") {
		t.Fatalf("Reachable() = %v, %v; want false with an error that hides the password", ok, lastErr)
	}
	if err := e.restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	sinktest.Eventually(t, 30*time.Second, "the sink to reach the server", func() bool { ok, _, _ := s.Reachable(); return ok })
	id := uniq()
	t.Cleanup(func() { deleteStream(t, e.URL, "L"+id) })
	s2 := newSink(t, natssink.Config{URL: e.URL, Route: "l" + id + ".{aggregate_type}", Stream: "L" + id, StreamSubjects: []string{"l" + id + ".>"}})
	mustPublish(t, s2, sinktest.Message("a", 0))
	if _, err := natssink.New(context.Background(), natssink.Config{URL: url, Stream: "bad.name"}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("bad stream name: %v, want ErrInvalidConfig", err)
	}
	if _, err := natssink.New(context.Background(), natssink.Config{URL: url, Route: "$SYS.audit"}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("a literal route to $SYS.audit: %v, want ErrInvalidConfig", err)
	}
}

// Event data cannot reconfigure the broker: an aggregate type that makes
// a wildcard or system subject fails that event for good, naming the
// field and the value, and the stream's subjects stay as they were.
func TestRoutingCannotChangeTheStream(t *testing.T) {
	url := sharedURL(t)
	_, js := jsClient(t, url)
	id := uniq()
	stream := "R" + id
	t.Cleanup(func() { deleteStream(t, url, stream) })
	s := newSink(t, natssink.Config{URL: url, Route: "r" + id + ".{aggregate_type}", Stream: stream, StreamSubjects: []string{"r" + id + ".payment"}})
	mustPublish(t, s, sinktest.Message("a", 0))
	before := streamInfo(t, js, stream).Config.Subjects
	// s2 routes by the aggregate type alone, so that "$SYS.x" makes a
	// system subject; it gets only bad events, refused before any lookup.
	s2 := newSink(t, natssink.Config{URL: url, Route: "{aggregate_type}", Stream: stream})
	for _, bad := range []string{"merchant.>", "*", "$SYS.x", "$JS.API.x", "x.*.y", "a b", ">"} {
		for _, sk := range []*natssink.Sink{s, s2} {
			msgs := []outbox.Message{typed(sinktest.Message("bad", 0), bad), typed(sinktest.Message("bad", 1), bad)}
			if sk == s {
				msgs = append(msgs, sinktest.Message("good", 0))
			}
			res := publish(t, sk, msgs...)
			var de *sink.DestinationError
			if !outbox.IsPermanent(res[0]) || !errors.As(res[0], &de) || !strings.Contains(res[0].Error(), `aggregate_type "`+bad+`"`) {
				t.Errorf("aggregate type %q: %v, want a permanent DestinationError naming aggregate_type", bad, res[0])
			}
			if !errors.Is(res[1], outbox.ErrNotAttempted) {
				t.Errorf("aggregate type %q, second event: %v, want not attempted", bad, res[1])
			}
			if len(res) == 3 && res[2] != nil {
				t.Errorf("another aggregate failed: %v", res[2])
			}
		}
	}
	if after := streamInfo(t, js, stream).Config.Subjects; !slices.Equal(before, after) {
		t.Fatalf("stream %s subjects changed from %v to %v", stream, before, after)
	}
	if n := streamInfo(t, js, stream).State.Msgs; n != 1+7 {
		t.Fatalf("stream %s holds %d messages, want 8 (the good ones)", stream, n)
	}
}

func TestCloseWaitsThenRefuses(t *testing.T) {
	e := startPrivate(t)
	s := newSink(t, natssink.Config{URL: e.URL})
	mustPublish(t, s, sinktest.Message("a", 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if res := s.Publish(ctx, []outbox.Message{sinktest.Message("a", 1)}); !errors.Is(res[0], outbox.ErrClosed) {
		t.Fatalf("Publish after Close: %v", res[0])
	}
}

// TestRefusalDuringReconnectIsReported: nats.go hands a refusal of the
// credentials met while reconnecting to no handler. The sink first fails
// to dial a stopped server; when the server comes back and refuses the
// credentials, Reachable must say so, not keep the dial's error.
func TestRefusalDuringReconnectIsReported(t *testing.T) {
	e := startPrivate(t)
	e.stop()
	s := newSink(t, natssink.Config{URL: strings.Replace(e.URL, "nats://", "nats://relay:wrong-pass-8@", 1), ReconnectWait: 20 * time.Millisecond})
	if ok, lastErr, _ := s.Reachable(); ok || lastErr == nil {
		t.Fatalf("Reachable() with the server stopped = %v, %v; want false with an error", ok, lastErr)
	}
	e.setCredentials("relay", "right-pass")
	if err := e.restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	var last error
	sinktest.Eventually(t, time.Minute, "a refusal of the credentials", func() bool {
		_, last, _ = s.Reachable()
		return last != nil && strings.Contains(strings.ToLower(last.Error()), "authorization")
	})
	if strings.Contains(last.Error(), "wrong-pass-8") {
		t.Fatalf("Reachable() error %q shows the password", last)
	}
}

// Credentials the server refuses: the sink keeps trying (it does not end
// up closed), publishes fail retryably, and the password never shows;
// once the server takes them (here: it no longer asks), the sink connects.
func TestRefusedCredentialsKeepRetrying(t *testing.T) {
	e := startPrivate(t)
	e.stop()
	e.setCredentials("relay", "right-pass")
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, natssink.Config{URL: strings.Replace(e.URL, "nats://", "nats://relay:wrong-pass-7@", 1), ReconnectWait: 20 * time.Millisecond})
	// Under load the first dial can time out before the server refuses;
	// the refusal of a later attempt must then show (see
	// TestRefusalDuringReconnectIsReported). The failure prints the last
	// error seen.
	wait.Until(t, 3*time.Minute, "a refusal of the credentials", func() (bool, error) {
		_, err, _ := s.Reachable()
		if err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization") {
			return true, nil
		}
		return false, err
	})
	for range 3 {
		res := publish(t, s, sinktest.Message("a", 0))
		if res[0] == nil || outbox.IsPermanent(res[0]) || errors.Is(res[0], outbox.ErrClosed) || strings.Contains(res[0].Error(), "wrong-pass-7") {
			t.Fatalf("publish with refused credentials: %v; want retryable, not closed, without the password", res[0])
		}
	}
	e.stop()
	e.setCredentials("", "")
	if err := e.restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	sinktest.Eventually(t, 30*time.Second, "the sink to connect once the server takes it", func() bool { ok, _, _ := s.Reachable(); return ok })
}
