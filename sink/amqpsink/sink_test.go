package amqpsink_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/amqpsink"
	"github.com/txoutbox/outbox/sink/sinkkit"
	"github.com/txoutbox/outbox/sink/sinktest"
)

func newSink(t *testing.T, cfg amqpsink.Config) *amqpsink.Sink {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := amqpsink.New(context.Background(), cfg)
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

func publish(t *testing.T, s *amqpsink.Sink, msgs ...outbox.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := s.Publish(ctx, msgs)
	if len(res) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(res), len(msgs))
	}
	return res
}

func mustPublish(t *testing.T, s *amqpsink.Sink, msgs ...outbox.Message) {
	t.Helper()
	for i, err := range publish(t, s, msgs...) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

// publishUntilOK retries, as the relay would, until every message is
// confirmed or the deadline passes.
func publishUntilOK(t *testing.T, s *amqpsink.Sink, msgs ...outbox.Message) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var failed []string
		for i, err := range publish(t, s, msgs...) {
			if outbox.IsPermanent(err) {
				t.Fatalf("message %d failed permanently: %v", i, err)
			}
			if err != nil {
				failed = append(failed, err.Error())
			}
		}
		if len(failed) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing: %v", failed)
		}
		tick := time.NewTimer(100 * time.Millisecond) // the relay's backoff
		<-tick.C
	}
}

func readN(t *testing.T, r *queueReader, n int) []amqp.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ds, err := r.deliveries(ctx, n)
	if err != nil {
		t.Fatalf("read %d of %d messages: %v", len(ds), n, err)
	}
	return ds
}

// The message carries the event as the package documents it.
func TestMessageProperties(t *testing.T) {
	t.Parallel()
	u := brokerURL(t)
	ex := "outbox.test." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	s := newSink(t, amqpsink.Config{URL: u, Exchange: ex})
	r := newQueueReader(t, u, ex, "#", false)
	m := sinktest.Message("tx-1", 0)
	m.AggregateType = "merchant"
	mustPublish(t, s, m)
	d := readN(t, r, 1)[0]
	want := map[string]string{
		"routing key":  "merchant.events",
		"message id":   m.EventID.String(),
		"type":         m.EventType,
		"content type": "application/json",
		"body":         string(m.Payload),
		"delivery":     strconv.Itoa(int(amqp.Persistent)),
	}
	got := map[string]string{
		"routing key":  d.RoutingKey,
		"message id":   d.MessageId,
		"type":         d.Type,
		"content type": d.ContentType,
		"body":         string(d.Body),
		"delivery":     strconv.Itoa(int(d.DeliveryMode)),
	}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("%s = %q, want %q", k, got[k], want[k])
		}
	}
	for _, kv := range sinkkit.BrokerHeaders(&m) {
		if v, _ := d.Headers[kv[0]].(string); v != kv[1] {
			t.Errorf("header %s = %v, want %q", kv[0], d.Headers[kv[0]], kv[1])
		}
	}
}

// The exchange is declared (topic, durable) only when it is absent; an
// existing exchange is used as it is.
func TestExchangeDeclaredIfAbsent(t *testing.T) {
	t.Parallel()
	u := brokerURL(t)
	ex := "outbox.test." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	s0 := newSink(t, amqpsink.Config{URL: u, Exchange: ex})
	sinktest.Eventually(t, 30*time.Second, "the sink to connect", func() bool { ok, _, _ := s0.Reachable(); return ok })
	_, ch := dialT(t, u)
	if err := ch.ExchangeDeclarePassive(ex, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatalf("exchange %s was not declared: %v", ex, err)
	}

	other := "outbox.test." + uniq()
	t.Cleanup(func() { deleteExchange(u, other) })
	_, ch = dialT(t, u)
	if err := ch.ExchangeDeclare(other, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, amqpsink.Config{URL: u, Exchange: other, Route: "k"})
	res := publish(t, s, sinktest.Message("a", 0))
	if res[0] == nil || !strings.Contains(res[0].Error(), "unroutable") {
		t.Fatalf("publish to an exchange with no queue: %v, want unroutable", res[0])
	}
}

// An unroutable message is returned by the broker and then confirmed: the
// sink reports it retryable, never delivered, and does not send the later
// events of its aggregate; other aggregates are delivered.
func TestUnroutableIsRetryable(t *testing.T) {
	t.Parallel()
	u := brokerURL(t)
	ex := "outbox.test." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	s := newSink(t, amqpsink.Config{URL: u, Exchange: ex})
	r := newQueueReader(t, u, ex, "payment.#", false)
	var msgs []outbox.Message
	for i := 0; i < 20; i++ {
		msgs = append(msgs, sinktest.Message("p"+strconv.Itoa(i), 0))
		lost := sinktest.Message("m"+strconv.Itoa(i), 0)
		lost.AggregateType = "merchant" // merchant.events: no queue bound
		msgs = append(msgs, lost, sinktest.Message("m"+strconv.Itoa(i), 1))
		msgs[len(msgs)-1].AggregateType = "merchant"
	}
	res := publish(t, s, msgs...)
	for i := 0; i < len(msgs); i += 3 {
		if res[i] != nil {
			t.Fatalf("routable event: %v", res[i])
		}
		if err := res[i+1]; err == nil || outbox.IsPermanent(err) || !strings.Contains(err.Error(), "unroutable") {
			t.Fatalf("unroutable event: %v, want a retryable 'unroutable' error", err)
		}
		if !errors.Is(res[i+2], outbox.ErrNotAttempted) {
			t.Fatalf("event after the unroutable one: %v, want not attempted", res[i+2])
		}
	}
	if got := readN(t, r, 20); len(got) != 20 {
		t.Fatalf("%d routable events arrived, want 20", len(got))
	}
}

// A queue that rejects publishes when full makes the broker nack: the
// sink reports the event retryable, does not send the next one of its
// aggregate, and the queue holds nothing out of order.
func TestNackIsRetryable(t *testing.T) {
	t.Parallel()
	u := brokerURL(t)
	ex := "outbox.test." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	s := newSink(t, amqpsink.Config{URL: u, Exchange: ex})
	r := &queueReader{url: u, exchange: ex, pattern: "#", queue: "outbox-test-" + uniq(),
		args: amqp.Table{"x-max-length": int32(2), "x-overflow": "reject-publish"}}
	if err := r.connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.conn.Close() })
	res := publish(t, s, sinktest.Message("k", 0), sinktest.Message("k", 1), sinktest.Message("k", 2), sinktest.Message("k", 3))
	if res[0] != nil || res[1] != nil {
		t.Fatalf("first two: %v, %v", res[0], res[1])
	}
	if err := res[2]; err == nil || outbox.IsPermanent(err) || !strings.Contains(err.Error(), "nacked") {
		t.Fatalf("event into a full reject-publish queue: %v, want a retryable nack", err)
	}
	if !errors.Is(res[3], outbox.ErrNotAttempted) {
		t.Fatalf("the event after it: %v, want not attempted", res[3])
	}
	if got := readN(t, r, 2); len(got) != 2 {
		t.Fatalf("the queue holds %d messages, want 2", len(got))
	}
}

// The broker refuses a message over its max_message_size by closing the
// channel: the sink reports that event permanently failed, learns the
// limit, refuses the next oversized event without sending it, and
// reconnects for the rest. The limit is set (1 MiB) on a private node,
// never on the shared broker.
func TestBrokerRefusesOversized(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	u := startRabbitNode(t, "max_message_size = "+strconv.Itoa(limit)).URL

	ex := "outbox.test." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	s := newSink(t, amqpsink.Config{URL: u, Exchange: ex, ReconnectWait: 50 * time.Millisecond}) // default limit: 128 MiB
	r := newQueueReader(t, u, ex, "#", false)
	big := sinktest.Message("big", 0)
	big.Payload = bigPayload(2 * limit)
	res := publish(t, s, big, sinktest.Message("big", 1))
	t.Log(res[0])
	if !outbox.IsPermanent(res[0]) || !strings.Contains(res[0].Error(), "max size "+strconv.Itoa(limit)) {
		t.Fatalf("oversized event: %v, want permanent, naming the broker's limit", res[0])
	}
	if !errors.Is(res[1], outbox.ErrNotAttempted) {
		t.Fatalf("the event after it: %v, want not attempted", res[1])
	}

	big2 := sinktest.Message("big2", 0)
	big2.Payload = bigPayload(limit + 100)
	ok := sinktest.Message("ok", 0)
	var res2 []error
	deadline := time.Now().Add(30 * time.Second)
	for {
		res2 = publish(t, s, big2, ok)
		if res2[1] == nil || time.Now().After(deadline) {
			break
		}
		tick := time.NewTimer(50 * time.Millisecond) // reconnecting: retry like the relay
		<-tick.C
	}
	if !outbox.IsPermanent(res2[0]) || !strings.Contains(res2[0].Error(), "exceeds the broker's max message size of "+strconv.Itoa(limit)) {
		t.Fatalf("second oversized event: %v, want refused by the learned limit", res2[0])
	}
	if res2[1] != nil {
		t.Fatalf("a small event after the refusal: %v", res2[1])
	}
	for _, d := range readN(t, r, 1) {
		if d.MessageId == big.EventID.String() || d.MessageId == big2.EventID.String() {
			t.Fatal("an oversized message reached the queue")
		}
	}
}

// When the broker drops the connection, publishes fail retryably and the
// sink reconnects on its own. The connection is closed from the broker's
// side with rabbitmqctl, on a private node.
func TestReconnectAfterConnectionClosed(t *testing.T) {
	t.Parallel()
	node := startRabbitNode(t)
	u := node.URL
	ex := "outbox.test." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	name := "outbox-test-" + uniq()
	s := newSink(t, amqpsink.Config{URL: u, Exchange: ex, ConnectionName: name, ReconnectWait: 50 * time.Millisecond})
	r := newQueueReader(t, u, ex, "#", false)
	mustPublish(t, s, sinktest.Message("a", 0))

	// Close the sink's connection from the broker side.
	out := node.rabbitmqctl(t, "list_connections", "--silent", "pid", "client_properties")
	var pid string
	for line := range strings.Lines(out) {
		if strings.Contains(line, name) {
			pid = strings.Fields(line)[0]
		}
	}
	if pid == "" {
		t.Fatalf("connection %s not listed:\n%s", name, out)
	}
	node.rabbitmqctl(t, "close_connection", pid, "test: closing the sink's connection")

	sawFailure := false
	deadline := time.Now().Add(30 * time.Second)
	for n := 1; ; n++ {
		res := publish(t, s, sinktest.Message("a", n))
		if res[0] == nil {
			break
		}
		if !sawFailure {
			t.Log(res[0])
		}
		sawFailure = true
		if outbox.IsPermanent(res[0]) {
			t.Fatalf("publish while reconnecting: %v, want retryable", res[0])
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sink did not reconnect: %v", res[0])
		}
		tick := time.NewTimer(20 * time.Millisecond)
		<-tick.C
	}
	if !sawFailure {
		t.Log("the sink had reconnected before the first publish")
	}
	if got := readN(t, r, 2); len(got) < 2 {
		t.Fatalf("%d messages arrived", len(got))
	}
}

// New succeeds while the broker is unreachable: publishes fail at once,
// retryably, naming the broker without its password; Reachable says the
// broker is down; once it is reachable (a proxy to the shared broker
// opens), the sink connects on its own and delivers.
func TestNewWithoutBrokerConnectsLater(t *testing.T) {
	u := brokerURL(t)
	pu, _ := url.Parse(u)
	proxy := sinktest.NewProxy(t, pu.Host)
	pu.Host = proxy.Addr
	ex := "outbox.test." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	s := newSink(t, amqpsink.Config{URL: pu.String(), Exchange: ex, Route: "late.{aggregate_type}", ReconnectWait: 20 * time.Millisecond, ConnectTimeout: time.Second})
	start := time.Now()
	res := publish(t, s, sinktest.Message("a", 0), sinktest.Message("a", 1), sinktest.Message("b", 0))
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a publish with no broker took %s: it should fail at once", took)
	}
	pass, _ := pu.User.Password()
	for i, err := range res {
		if err == nil || outbox.IsPermanent(err) {
			t.Fatalf("result %d with no broker: %v, want retryable", i, err)
		}
		if pass != "" && strings.Contains(err.Error(), ":"+pass+"@") {
			t.Fatalf("error %q quotes the password", err)
		}
	}
	if !strings.Contains(res[0].Error(), "not connected") || !strings.Contains(res[0].Error(), proxy.Addr) {
		t.Fatalf("error %q must say the sink is not connected to %s", res[0], proxy.Addr)
	}
	if ok, lastErr, _ := s.Reachable(); ok || lastErr == nil {
		t.Fatalf("Reachable() = %v, %v with no broker", ok, lastErr)
	}
	if err := proxy.Open(); err != nil {
		t.Fatal(err)
	}
	sinktest.Eventually(t, 30*time.Second, "the sink to reach the broker", func() bool { ok, _, _ := s.Reachable(); return ok })
	r := newQueueReader(t, u, ex, "late.#", false)
	m := sinktest.Message("a", 0)
	mustPublish(t, s, m)
	if got := readN(t, r, 1); len(got) != 1 || got[0].MessageId != m.EventID.String() {
		t.Fatalf("after the broker came up, read %v", got)
	}
}

func TestBadPasswordIsRetryableAndHidden(t *testing.T) {
	u := brokerURL(t)
	bad := strings.Replace(u, "guest:guest@", "guest:wrong-pass@", 1)
	if bad == u {
		t.Skip("OUTBOX_TEST_AMQP has no guest:guest credentials to spoil")
	}
	s := newSink(t, amqpsink.Config{URL: bad, Exchange: "outbox.test." + uniq(), ReconnectWait: 50 * time.Millisecond})
	res := publish(t, s, sinktest.Message("a", 0))
	if res[0] == nil || outbox.IsPermanent(res[0]) || strings.Contains(res[0].Error(), "wrong-pass") {
		t.Fatalf("publish with a bad password: %v; want a retryable error without the password", res[0])
	}
	if _, lastErr, _ := s.Reachable(); lastErr == nil || strings.Contains(lastErr.Error(), "wrong-pass") {
		t.Fatalf("Reachable error %v: want one, without the password", lastErr)
	}
}

// Event data cannot make a routing key the protocol cannot carry: over
// 255 bytes or invalid UTF-8 fails that event for good, naming the field.
func TestInvalidRoutingKeyIsPermanent(t *testing.T) {
	u := brokerURL(t)
	ex := "outbox.test." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	s := newSink(t, amqpsink.Config{URL: u, Exchange: ex, Route: "rk.{aggregate_type}"})
	r := newQueueReader(t, u, ex, "rk.#", false)
	for _, bad := range []string{strings.Repeat("x", 260), "bad\xffutf8"} {
		msgs := []outbox.Message{sinktest.Message("a", 0), sinktest.Message("a", 1), sinktest.Message("good", 0)}
		msgs[0].AggregateType, msgs[1].AggregateType = bad, bad
		res := publish(t, s, msgs...)
		var de *sink.DestinationError
		if !outbox.IsPermanent(res[0]) || !errors.As(res[0], &de) || de.Kind != "routing key" || !strings.Contains(res[0].Error(), "aggregate_type") {
			t.Errorf("aggregate type of %d bytes: %v, want a permanent routing-key DestinationError", len(bad), res[0])
		}
		if !errors.Is(res[1], outbox.ErrNotAttempted) || res[2] != nil {
			t.Errorf("after the refused event: %v (want not attempted), other aggregate %v", res[1], res[2])
		}
	}
	if got := readN(t, r, 2); len(got) != 2 {
		t.Fatalf("%d messages arrived, want the 2 good ones", len(got))
	}
	if _, err := amqpsink.New(context.Background(), amqpsink.Config{URL: u, Route: strings.Repeat("k", 256)}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("a literal routing key of 256 bytes: %v, want ErrInvalidConfig", err)
	}
}

func TestCloseWaitsThenRefuses(t *testing.T) {
	t.Parallel()
	u := brokerURL(t)
	ex := "outbox.test." + uniq()
	t.Cleanup(func() { deleteExchange(u, ex) })
	s := newSink(t, amqpsink.Config{URL: u, Exchange: ex})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if res := s.Publish(ctx, []outbox.Message{sinktest.Message("a", 0)}); !errors.Is(res[0], outbox.ErrClosed) {
		t.Fatalf("Publish after Close: %v", res[0])
	}
}
