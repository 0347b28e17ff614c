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
	// Exact subjects of this test: a stream on "f<id>.>" would overlap a
	// stream left on the shared server on *.events (f<id>.events), and
	// JetStream refuses overlapping streams.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: full, Subjects: []string{"f" + id + ".payment"}, MaxMsgs: 2, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: small, Subjects: []string{"s" + id + ".payment"}, MaxMsgSize: 512}); err != nil {
		t.Fatal(err)
	}

	s := newSink(t, natssink.Config{URL: url, Route: "f" + id + ".{aggregate_type}", NoCreateStream: true})
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

	s2 := newSink(t, natssink.Config{URL: url, Route: "s" + id + ".{aggregate_type}", NoCreateStream: true})
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
	e := startEmbedded(t)
	s := newSink(t, natssink.Config{URL: e.URL, Route: "d.{aggregate_type}", StreamSubjects: []string{"d.>"},
		PublishTimeout: 300 * time.Millisecond, ReconnectWait: 20 * time.Millisecond})
	mustPublish(t, s, sinktest.Message("a", 0))
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

func TestNewFailsClearly(t *testing.T) {
	e := startEmbedded(t)
	url := e.URL
	e.stop()
	_, err := natssink.New(context.Background(), natssink.Config{URL: strings.Replace(url, "nats://", "nats://bob:s3cret@", 1), ConnectTimeout: time.Second, Logger: quiet})
	if err == nil {
		t.Fatal("New succeeded with no server")
	}
	if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "bob:xxxxx@") {
		t.Fatalf("error %q must name the server without its password", err)
	}
	if _, err := natssink.New(context.Background(), natssink.Config{URL: url, Stream: "bad.name"}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("bad stream name: %v, want ErrInvalidConfig", err)
	}
}

func TestCloseWaitsThenRefuses(t *testing.T) {
	e := startEmbedded(t)
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
