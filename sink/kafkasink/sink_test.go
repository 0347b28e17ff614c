package kafkasink_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/kafkasink"
	"github.com/txoutbox/outbox/sink/sinkkit"
	"github.com/txoutbox/outbox/sink/sinktest"
)

func newSink(t *testing.T, cfg kafkasink.Config) *kafkasink.Sink {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := kafkasink.New(context.Background(), cfg)
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

// incompressible returns a JSON payload of about n bytes that snappy
// cannot shrink, so its size on the wire is its size.
func incompressible(n int) json.RawMessage {
	b := make([]byte, n*3/4)
	_, _ = rand.Read(b)
	return json.RawMessage(`{"pad":"` + base64.StdEncoding.EncodeToString(b) + `"}`)
}

func payloadN(t *testing.T, r sinktest.Received) int {
	var p struct{ N int }
	if err := json.Unmarshal(r.Payload, &p); err != nil {
		t.Fatalf("payload %s: %v", r.Payload, err)
	}
	return p.N
}

func publishCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestRecordLayout checks what a consumer sees: key = aggregate id, value =
// payload, the outbox-* headers first and in order, then the event's own
// headers; and every record of one key in one partition, in order.
func TestRecordLayout(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t)
	topic := prefix + ".payment.events"
	c := newCluster(t, kfake.SeedTopics(8, topic))
	s := newSink(t, kafkasink.Config{Brokers: []string{c.addr()}, Route: prefix + ".{aggregate_type}.events"})

	var msgs []outbox.Message
	for i := 0; i < 40; i++ {
		msgs = append(msgs, sinktest.Message(fmt.Sprintf("tx-%d", i%4), i/4))
	}
	for i, err := range s.Publish(publishCtx(t), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	r := newReader(t, c.addr(), topic)
	got, err := r.read(publishCtx(t), len(msgs))
	if err != nil {
		t.Fatal(err)
	}
	partitionOf := map[string]int32{}
	next := map[string]int{}
	for _, rec := range r.raw() {
		key := string(rec.Key)
		want := sinkkit.BrokerHeaders(&msgs[0])
		if len(rec.Headers) < len(want)-1 {
			t.Fatalf("record has %d headers, want at least %d", len(rec.Headers), len(want))
		}
		for i, name := range []string{sink.HeaderEventID, sink.HeaderEventType, sink.HeaderAggregateType, sink.HeaderAggregateID, sink.HeaderAttempt} {
			if rec.Headers[i].Key != name {
				t.Fatalf("header %d is %q, want %q (outbox-* headers come first, in order)", i, rec.Headers[i].Key, name)
			}
		}
		if p, ok := partitionOf[key]; ok && p != rec.Partition {
			t.Fatalf("key %s was produced to partitions %d and %d", key, p, rec.Partition)
		}
		partitionOf[key] = rec.Partition
	}
	byID := map[string]outbox.Message{}
	for _, m := range msgs {
		byID[m.EventID.String()] = m
	}
	for _, g := range got {
		m, ok := byID[g.EventID]
		if !ok {
			t.Fatalf("unknown event %s arrived", g.EventID)
		}
		if g.AggregateID != m.AggregateID || g.AggregateType != "payment" || g.EventType != m.EventType || string(g.Payload) != string(m.Payload) {
			t.Fatalf("event %s arrived as %+v", g.EventID, g)
		}
		if g.Headers["traceparent"] != m.Headers["traceparent"] {
			t.Fatalf("event header traceparent arrived as %q, want %q", g.Headers["traceparent"], m.Headers["traceparent"])
		}
		if n := payloadN(t, g); n != next[g.AggregateID] {
			t.Fatalf("key %s: message %d arrived when %d was expected", g.AggregateID, n, next[g.AggregateID])
		}
		next[g.AggregateID]++
	}
	if len(partitionOf) < 2 {
		t.Logf("all keys landed in one partition (%v); the per-partition check was weak", partitionOf)
	}
}

// holdFirstProduce makes the cluster hold the next produce request until
// release is closed, then handle it normally.
func holdFirstProduce(c *cluster, release <-chan struct{}) (held <-chan struct{}) {
	h := make(chan struct{})
	var once sync.Once
	k := c.kfake
	k.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.DropControl()
		once.Do(func() { close(h) })
		k.SleepControl(func() { <-release })
		return nil, nil, false
	})
	return h
}

// TestFranzGoFailsBufferedRecordsBehindAFailedBatch checks the franz-go
// behaviour Publish relies on: when the broker refuses a batch, the records
// buffered behind it in the same partition fail with the same error and are
// not written, while a record produced after the failure is written.
func TestFranzGoFailsBufferedRecordsBehindAFailedBatch(t *testing.T) {
	t.Parallel()
	topic := uniquePrefix(t)
	c := newCluster(t, kfake.SeedTopics(1, topic), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addr()), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := publishCtx(t)
	// Warm up so that the producer id and metadata are loaded.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("warm-up")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	held := holdFirstProduce(c, release)
	type result struct {
		name string
		err  error
	}
	results := make(chan result, 3)
	produce := func(name string, value []byte) {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(name), Value: value}, func(_ *kgo.Record, err error) {
			results <- result{name, err}
		})
	}
	produce("big", incompressible(6000))
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the produce request never reached the broker")
	}
	produce("small-1", []byte("1")) // buffered behind the held request
	produce("small-2", []byte("2"))
	close(release)
	for i := 0; i < 3; i++ {
		var r result
		select {
		case r = <-results:
		case <-ctx.Done():
			t.Fatal("no promise")
		}
		if !errors.Is(r.err, kerr.MessageTooLarge) {
			t.Fatalf("%s: %v, want MESSAGE_TOO_LARGE (the batch ahead of it failed)", r.name, r.err)
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("after"), Value: []byte("3")}).FirstErr(); err != nil {
		t.Fatalf("a record produced after the failure: %v", err)
	}
	r := newReader(t, c.addr(), topic)
	if _, err := r.read(ctx, 2); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, rec := range r.raw() {
		keys = append(keys, string(rec.Key))
	}
	if strings.Join(keys, ",") != ",after" {
		t.Fatalf("the log holds keys %q, want only the warm-up and \"after\"", keys)
	}
}

// TestBatchRefusedAsTooLarge: the topic's limit is below the sink's
// MaxMessageBytes, so the broker refuses a whole batch because of one
// record. Only that record fails permanently; the others are resent alone
// and delivered, and its followers are not sent.
func TestBatchRefusedAsTooLarge(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t)
	topic := prefix + ".payment.events"
	c := newCluster(t, kfake.SeedTopics(1, topic), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	// A linger puts the whole call in one batch.
	s := newSink(t, kafkasink.Config{Brokers: []string{c.addr()}, Route: prefix + ".{aggregate_type}.events", Linger: 200 * time.Millisecond})

	a0, a1, a2 := sinktest.Message("a", 0), sinktest.Message("a", 1), sinktest.Message("a", 2)
	a1.Payload = incompressible(6000)
	msgs := []outbox.Message{a0, a1, a2}
	for i := 0; i < 5; i++ {
		msgs = append(msgs, sinktest.Message("b", i))
	}
	res := s.Publish(publishCtx(t), msgs)
	if res[0] != nil {
		t.Errorf("a0 (small, ahead of the big one): %v", res[0])
	}
	if !outbox.IsPermanent(res[1]) || !strings.Contains(res[1].Error(), "too large on its own") {
		t.Errorf("a1 (too large for the topic): %v, want a permanent error saying it is too large on its own", res[1])
	}
	if !errors.Is(res[2], outbox.ErrNotAttempted) {
		t.Errorf("a2 (behind the refused a1): %v, want not attempted", res[2])
	}
	for i := 3; i < len(msgs); i++ {
		if res[i] != nil {
			t.Errorf("b%d (small, another key): %v", i-3, res[i])
		}
	}
	r := newReader(t, c.addr(), topic)
	got, err := r.read(publishCtx(t), 6)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, g := range got {
		order = append(order, fmt.Sprintf("%s%d", g.AggregateID, payloadN(t, g)))
	}
	if strings.Join(order, ",") != "a0,b0,b1,b2,b3,b4" {
		t.Fatalf("the topic holds %v, want a0,b0,b1,b2,b3,b4", order)
	}
}

// TestDeadlinePassesWhileBuffered: a message whose deadline passes while
// it waits for a broker that is down is not sent once the broker is back,
// and the message behind it is not failed for good.
func TestDeadlinePassesWhileBuffered(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t)
	topic := prefix + ".payment.events"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	s := newSink(t, kafkasink.Config{Brokers: []string{c.addr()}, Route: prefix + ".{aggregate_type}.events"})
	warm := sinktest.Message("warm", 0)
	if err := s.Publish(publishCtx(t), []outbox.Message{warm})[0]; err != nil {
		t.Fatal(err)
	}

	c.kfake.Close()
	expiring := sinktest.Message("e", 0)
	expiring.Deadline = time.Now().Add(time.Second)
	behind := sinktest.Message("f", 0)
	done := make(chan []error, 1)
	go func() { done <- s.Publish(publishCtx(t), []outbox.Message{expiring, behind}) }()
	// Bring the broker back only once the deadline has passed.
	wait := time.NewTimer(time.Until(expiring.Deadline) + 100*time.Millisecond)
	<-wait.C
	if err := c.start(publishCtx(t)); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if !errors.Is(res[0], context.DeadlineExceeded) || outbox.IsPermanent(res[0]) {
		t.Fatalf("the expired message: %v, want a deadline exceeded error", res[0])
	}
	if outbox.IsPermanent(res[1]) {
		t.Fatalf("the message buffered behind the expired one: %v, want delivered or retryable", res[1])
	}
	marker := sinktest.Message("marker", 0)
	if err := s.Publish(publishCtx(t), []outbox.Message{marker})[0]; err != nil {
		t.Fatal(err)
	}
	r := newReader(t, c.addr(), topic)
	got, err := r.read(publishCtx(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if g.EventID == expiring.EventID.String() {
			t.Fatal("the message arrived after its deadline")
		}
		if g.EventID == behind.EventID.String() && errors.Is(res[1], outbox.ErrNotAttempted) {
			t.Fatalf("a message reported %v arrived", res[1])
		}
	}
	t.Logf("the message behind the expired one: %v", res[1])
}

// TestWrittenAfterItsPredecessorFailed: a message produced in the moment
// between its predecessor's failure and the sink learning of it is
// written; it must not be reported delivered (the relay would mark it
// PROCESSED ahead of its predecessor) nor not attempted.
func TestWrittenAfterItsPredecessorFailed(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t)
	c := newCluster(t, kfake.SeedTopics(1, prefix+".payment.Second"))
	// The first event type routes to a topic that does not exist.
	s := newSink(t, kafkasink.Config{Brokers: []string{c.addr()}, Route: prefix + ".{aggregate_type}.{event_type}"})
	first, second := sinktest.Message("k", 0), sinktest.Message("k", 1)
	second.EventType = "Second"
	firstFailed := make(chan struct{})
	kafkasink.SetHooks(s, func(i int) {
		if i == 1 {
			<-firstFailed // hand the second over only once the first has failed
		}
	}, func(i int, err error) {
		if i == 0 && err != nil {
			close(firstFailed)
		}
	})
	res := s.Publish(publishCtx(t), []outbox.Message{first, second})
	if !outbox.IsPermanent(res[0]) {
		t.Fatalf("the first (unknown topic): %v, want permanent", res[0])
	}
	if res[1] == nil || errors.Is(res[1], outbox.ErrNotAttempted) || !strings.Contains(res[1].Error(), "was written to topic") {
		t.Fatalf("the second: %v, want a failure saying it was written", res[1])
	}
	got, err := newReader(t, c.addr(), prefix+".payment.Second").read(publishCtx(t), 1)
	if err != nil || len(got) != 1 || got[0].EventID != second.EventID.String() {
		t.Fatalf("the topic holds %v (%v), want the second event", got, err)
	}
}

// TestClassification: a missing topic, an invalid topic name and an
// oversized message are permanent; a broker that is down is retryable.
func TestClassification(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t)
	c := newCluster(t, kfake.SeedTopics(1, prefix+".payment.events"))

	t.Run("UnknownTopic", func(t *testing.T) {
		t.Parallel()
		s := newSink(t, kafkasink.Config{Brokers: []string{c.addr()}, Route: prefix + ".missing.{aggregate_type}"})
		res := s.Publish(publishCtx(t), []outbox.Message{sinktest.Message("u", 0), sinktest.Message("u", 1)})
		if !outbox.IsPermanent(res[0]) || !strings.Contains(res[0].Error(), "does not exist") {
			t.Fatalf("unknown topic: %v, want permanent", res[0])
		}
		if !errors.Is(res[1], outbox.ErrNotAttempted) {
			t.Fatalf("follower: %v, want not attempted", res[1])
		}
	})
	t.Run("InvalidTopic", func(t *testing.T) {
		t.Parallel()
		s := newSink(t, kafkasink.Config{Brokers: []string{c.addr()}, Route: prefix + ".{aggregate_id}"})
		bad := sinktest.Message("tx/1", 0)
		good := sinktest.Message("payment.events", 0)
		res := s.Publish(publishCtx(t), []outbox.Message{bad, good})
		if !outbox.IsPermanent(res[0]) || !strings.Contains(res[0].Error(), `character '/'`) {
			t.Fatalf("invalid topic: %v, want permanent naming the character", res[0])
		}
		if res[1] != nil {
			t.Fatalf("valid topic: %v", res[1])
		}
	})
	t.Run("Oversized", func(t *testing.T) {
		t.Parallel()
		s := newSink(t, kafkasink.Config{Brokers: []string{c.addr()}, Route: prefix + ".{aggregate_type}.events", MaxMessageBytes: 2048})
		big := sinktest.Message("o", 0)
		big.Payload = incompressible(3000)
		res := s.Publish(publishCtx(t), []outbox.Message{big})
		if !outbox.IsPermanent(res[0]) || !strings.Contains(res[0].Error(), "over the 2048-byte limit") {
			t.Fatalf("oversized: %v, want permanent with the sizes", res[0])
		}
	})
	t.Run("BrokerDown", func(t *testing.T) {
		t.Parallel()
		down := newCluster(t, kfake.SeedTopics(1, prefix+".payment.events"))
		addr := down.addr()
		down.kfake.Close()
		s := newSink(t, kafkasink.Config{Brokers: []string{addr}, Route: prefix + ".{aggregate_type}.events", ProduceTimeout: 500 * time.Millisecond})
		res := s.Publish(publishCtx(t), []outbox.Message{sinktest.Message("d", 0), sinktest.Message("d", 1), sinktest.Message("e", 0)})
		for i, err := range res {
			if err == nil || outbox.IsPermanent(err) {
				t.Fatalf("message %d with the broker down: %v, want a retryable error", i, err)
			}
		}
		if !strings.Contains(res[0].Error(), "no acknowledgement") {
			t.Fatalf("broker down: %v, want it to say no acknowledgement came", res[0])
		}
	})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  kafkasink.Config
		want string
	}{
		{"no brokers", kafkasink.Config{}, "no brokers"},
		{"bad route", kafkasink.Config{Brokers: []string{"h"}, Route: "{tenant}.events"}, "unknown placeholder"},
		{"bad static topic", kafkasink.Config{Brokers: []string{"h"}, Route: "pay ments"}, "character ' '"},
		{"bad override", kafkasink.Config{Brokers: []string{"h"}, RouteOverrides: map[string]string{"merchant": "a/b"}}, "character '/'"},
		{"small limit", kafkasink.Config{Brokers: []string{"h"}, MaxMessageBytes: 10}, "MaxMessageBytes 10 is out of range"},
		{"negative timeout", kafkasink.Config{Brokers: []string{"h"}, ProduceTimeout: -1}, "negative"},
	} {
		_, err := kafkasink.New(context.Background(), tc.cfg)
		if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidConfig mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	cfg, err := kafkasink.ParseURL("kafka://k1:9093,k2?topic=outbox.{aggregate_type}&client_id=relay-a&max_message_bytes=2000000&produce_timeout=5s&linger=2ms&tls=true&auto_create_topics=true")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Brokers, ",") != "k1:9093,k2" || cfg.Route != "outbox.{aggregate_type}" || cfg.ClientID != "relay-a" ||
		cfg.MaxMessageBytes != 2000000 || cfg.ProduceTimeout != 5*time.Second || cfg.Linger != 2*time.Millisecond ||
		cfg.TLS == nil || !cfg.AllowAutoTopicCreation {
		t.Fatalf("parsed %+v", cfg)
	}
	if cfg, err := kafkasink.ParseURL("kafka://127.0.0.1:9092"); err != nil || cfg.Route != "" || len(cfg.Brokers) != 1 {
		t.Fatalf("minimal URL: %+v, %v", cfg, err)
	}
	for raw, want := range map[string]string{
		"http://k1:9092":                    "use the form kafka://",
		"kafka://":                          "names no broker",
		"kafka://k1/topic":                  "has a path",
		"kafka://user:secret@k1":            "SASL is not supported",
		"kafka://k1?topic={tenant}":         "unknown placeholder",
		"kafka://k1?acks=1":                 `unknown option "acks"`,
		"kafka://k1?produce_timeout=soon":   "not a duration",
		"kafka://k1?max_message_bytes=1MB":  "not a whole number",
		"kafka://k1?topic=a&topic=b":        "given 2 times",
		"kafka://k1?tls=maybe":              "not true or false",
		"kafka://k1?max_message_bytes=100":  "out of range",
		"kafka://k1?topic=merchant%2Faudit": "character '/'",
	} {
		_, err := kafkasink.ParseURL(raw)
		if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalidConfig mentioning %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseURL(%q) quotes the password: %v", raw, err)
		}
	}
}
