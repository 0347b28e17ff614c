package natssink_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/txoutbox/outbox/internal/e2etest"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// The end-to-end tests drive the real CLI: migrate and enqueue into
// PostgreSQL, `outbox relay --drain --sink nats://...`, then read the
// stream back with a consumer of their own.

// TestMain fails the package's tests if a goroutine they started is
// still running once they all passed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// readStream returns every message in a stream, in stream order, and
// checks that each carries its event id as its Nats-Msg-Id too.
func readStream(t *testing.T, js jetstream.JetStream, stream string) []sinktest.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	want := st.CachedInfo().State.Msgs
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []sinktest.Received
	for uint64(len(out)) < want {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			if id := m.Headers().Get(sink.HeaderEventID); id == "" || m.Headers().Get(jetstream.MsgIDHeader) != id {
				t.Fatalf("message on %s without the event id (%s=%q, Nats-Msg-Id=%q)", m.Subject(), sink.HeaderEventID, id, m.Headers().Get(jetstream.MsgIDHeader))
			}
			out = append(out, received(m))
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("read stream %s: %v", stream, err)
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d messages of stream %s", len(out), want, stream)
		}
	}
	return out
}

// checkDelivered asserts what e2etest.CheckArrived does, and that no
// event is in the stream twice (the stream drops repeats by Nats-Msg-Id).
func checkDelivered(t *testing.T, got []sinktest.Received, b *e2etest.Backlog, subjectOf func(aggType string) string) {
	t.Helper()
	if dups := e2etest.CheckArrived(t, got, b, subjectOf); dups != 0 {
		t.Fatalf("%d events are in the stream twice", dups)
	}
}

// TestE2EDrainSharedServer drains 2000 events over payment and merchant
// aggregates into the shared NATS server, on subjects of this test, with
// a --route override for merchant events.
func TestE2EDrainSharedServer(t *testing.T) {
	url := sharedURL(t)
	id := uniq()
	b := e2etest.NewBacklog(t, "e2e_nats", 2000, e2etest.Aggregates(30, 10))
	stream := "E" + id
	t.Cleanup(func() { deleteStream(t, url, stream) })
	sinkURL := fmt.Sprintf("%s?subject=e%s.{aggregate_type}.events&stream=%s&stream_subjects=e%s.*.*", url, id, stream, id)
	e2etest.RunCLI(t, "", b.RelayArgs(sinkURL, "--route", "merchant=e"+id+".merchant.audit")...)
	if n := b.Processed(t); n != len(b.Events) {
		t.Fatalf("%d of %d events PROCESSED after the drain", n, len(b.Events))
	}
	_, js := jsClient(t, url)
	checkDelivered(t, readStream(t, js, stream), b, func(typ string) string {
		if typ == "merchant" {
			return "e" + id + ".merchant.audit"
		}
		return "e" + id + "." + typ + ".events"
	})
}

// TestE2EDrainDefaults drains into a private server with the sink's
// defaults: subjects payment.events and merchant.events, and the stream
// OUTBOX on *.events, which the sink creates.
func TestE2EDrainDefaults(t *testing.T) {
	e := startPrivate(t)
	b := e2etest.NewBacklog(t, "e2e_nats", 2000, e2etest.Aggregates(30, 10))
	e2etest.RunCLI(t, "", b.RelayArgs(e.URL)...)
	if n := b.Processed(t); n != len(b.Events) {
		t.Fatalf("%d of %d events PROCESSED after the drain", n, len(b.Events))
	}
	_, js := jsClient(t, e.URL)
	st, err := js.Stream(context.Background(), "OUTBOX")
	if err != nil {
		t.Fatalf("the sink did not create stream OUTBOX: %v", err)
	}
	// *.events, or, on servers that refuse it (NATS 2.10 and later: it
	// could capture $JS.events), the subjects published to.
	subj := slices.Sorted(slices.Values(st.CachedInfo().Config.Subjects))
	if !slices.Equal(subj, []string{"*.events"}) && !slices.Equal(subj, []string{"merchant.events", "payment.events"}) {
		t.Fatalf("stream OUTBOX has subjects %v, want [*.events] or [merchant.events payment.events]", subj)
	}
	checkDelivered(t, readStream(t, js, "OUTBOX"), b, func(typ string) string { return typ + ".events" })
}

// TestE2ERestartDuringDrain restarts a private NATS server while a relay
// drains a large backlog into it: nothing is lost, nothing is stored
// twice, order holds, and the drain completes with exit 0.
func TestE2ERestartDuringDrain(t *testing.T) {
	e := startPrivate(t)
	const n = 5000
	b := e2etest.NewBacklog(t, "e2e_nats", n, e2etest.Aggregates(80, 20))
	_, js := jsClient(t, e.URL)

	// The rate limit stretches the drain over about 20 s, so that most of
	// the backlog is still to send when the server restarts, on a fast
	// machine too.
	relay := e2etest.StartCLI(t, b.RelayArgs(fmt.Sprintf("%s?publish_timeout=2s&reconnect_wait=50ms&rate=%d/s&burst=100", e.URL, n/20),
		"--batch", "100", "--backoff-min", "10ms", "--backoff-max", "200ms", "--max-retries", "1000")...)

	// Wait until a tenth of the backlog is in the stream, then restart.
	// The deadline only bounds a hang, with room for a drain that a busy
	// machine slows to several minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	relay.Await(ctx, t, 20*time.Millisecond, fmt.Sprintf("%d events in the stream", n/10), func() bool {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		defer scancel()
		st, err := js.Stream(sctx, "OUTBOX")
		return err == nil && st.CachedInfo().State.Msgs >= uint64(n/10)
	})
	if err := e.restart(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "OUTBOX")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got >= uint64(n) {
		t.Fatalf("the drain had finished (%d events stored) by the time the server was back: restart earlier", got)
	} else {
		t.Logf("server restarted with %d of %d events stored", got, n)
	}
	relay.Wait(ctx, t)
	if !strings.Contains(relay.Log(), "disconnected") {
		t.Errorf("the relay never saw the server go away; its log:\n%s", relay.Log())
	}
	if got := b.Processed(t); got != n {
		t.Fatalf("%d of %d events PROCESSED", got, n)
	}
	checkDelivered(t, readStream(t, js, "OUTBOX"), b, func(typ string) string { return typ + ".events" })
}

// TestE2EServerUpAfterRelayStarts starts the relay while no NATS server
// listens: it waits, says so at WARN, and delivers the whole backlog once
// a private server starts on that port.
func TestE2EServerUpAfterRelayStarts(t *testing.T) {
	e := startPrivate(t)
	e.stop()
	b := e2etest.NewBacklog(t, "e2e_nats", 500, e2etest.Aggregates(8, 4))
	relay := e2etest.StartCLI(t, b.RelayArgs(e.URL+"?reconnect_wait=50ms")...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	relay.Await(ctx, t, 20*time.Millisecond, "a WARN that NATS is unreachable", func() bool {
		return strings.Contains(relay.Log(), "level=WARN") && strings.Contains(relay.Log(), "unreachable")
	})
	if err := e.restart(ctx); err != nil {
		t.Fatal(err)
	}
	relay.Wait(ctx, t)
	if got := b.Processed(t); got != len(b.Events) {
		t.Fatalf("%d of %d events PROCESSED", got, len(b.Events))
	}
	_, js := jsClient(t, e.URL)
	checkDelivered(t, readStream(t, js, "OUTBOX"), b, func(typ string) string { return typ + ".events" })
}
