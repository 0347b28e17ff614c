package amqpsink_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// The tests share the RabbitMQ broker of OUTBOX_TEST_AMQP, on exchanges
// and queues of their own, and never change it: a test that stops,
// restarts or reconfigures a broker, or closes connections from the
// broker's side, does so on a private node (rabbitnode_test.go).

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func uniq() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// brokerURL returns the broker (OUTBOX_TEST_AMQP), or skips.
func brokerURL(t testing.TB) string { return testenv.AMQP.Addr(t) }

// waitForBroker returns once the broker at u accepts an AMQP connection,
// or ctx ends.
func waitForBroker(ctx context.Context, u string) error {
	for {
		c, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the broker at %s does not accept connections: %w", sinkURLForLog(u), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sinkURLForLog drops the password of a test broker URL.
func sinkURLForLog(u string) string { return sinkkit.RedactURL(u) }

// dialT opens a connection and channel for the test, closed at cleanup.
func dialT(t testing.TB, u string) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return conn, ch
}

// queueReader reads a queue bound to an exchange with basic.get: a
// message confirmed to the publisher is in the queue, so once a get finds
// the queue empty, every confirmed message has been read.
type queueReader struct {
	url, exchange, pattern string
	durable                bool
	queue                  string
	args                   amqp.Table

	mu   sync.Mutex
	conn *amqp.Connection
	ch   *amqp.Channel
	got  []amqp.Delivery
}

// newQueueReader declares a queue of its own, bound to exchange with the
// binding key pattern. A durable queue survives a broker restart; it is
// deleted at cleanup. A non-durable one is exclusive to the reader.
func newQueueReader(t testing.TB, u, exchange, pattern string, durable bool) *queueReader {
	t.Helper()
	r := &queueReader{url: u, exchange: exchange, pattern: pattern, durable: durable, queue: "outbox-test-" + uniq()}
	if err := r.connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.conn != nil && !r.conn.IsClosed() {
			_, _ = r.ch.QueueDelete(r.queue, false, false, false)
			r.conn.Close()
		}
	})
	return r
}

// connect (re)opens the connection and declares the exchange, the queue
// and its binding.
func (r *queueReader) connect() error {
	conn, err := amqp.Dial(r.url)
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.ExchangeDeclare(r.exchange, amqp.ExchangeTopic, true, false, false, false, nil)
	}
	if err == nil {
		_, err = ch.QueueDeclare(r.queue, r.durable, false, !r.durable, false, r.args)
	}
	if err == nil {
		err = ch.QueueBind(r.queue, r.pattern, r.exchange, false, nil)
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("reader of %s/%s: %w", r.exchange, r.pattern, err)
	}
	r.mu.Lock()
	if r.conn != nil {
		r.conn.Close()
	}
	r.conn, r.ch = conn, ch
	r.mu.Unlock()
	return nil
}

// drain takes every message now in the queue.
func (r *queueReader) drain() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		d, ok, err := r.ch.Get(r.queue, true)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		r.got = append(r.got, d)
	}
}

// deliveries waits until at least n messages were read and the queue is
// empty, or ctx ends.
func (r *queueReader) deliveries(ctx context.Context, n int) ([]amqp.Delivery, error) {
	for {
		err := r.drain()
		r.mu.Lock()
		got := append([]amqp.Delivery(nil), r.got...)
		r.mu.Unlock()
		if err == nil && len(got) >= n {
			return got, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return got, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Read adapts deliveries to the conformance suite.
func (r *queueReader) Read(ctx context.Context, n int) ([]sinktest.Received, error) {
	ds, err := r.deliveries(ctx, n)
	out := make([]sinktest.Received, 0, len(ds))
	for _, d := range ds {
		out = append(out, received(d))
	}
	return out, err
}

func received(d amqp.Delivery) sinktest.Received {
	h := map[string]string{}
	for k, v := range d.Headers {
		if s, ok := v.(string); ok {
			h[k] = s
		}
	}
	return sinktest.Received{
		EventID:       h[sink.HeaderEventID],
		AggregateType: h[sink.HeaderAggregateType],
		AggregateID:   h[sink.HeaderAggregateID],
		EventType:     h[sink.HeaderEventType],
		Headers:       h,
		Payload:       d.Body,
		Destination:   d.RoutingKey,
	}
}

// deleteExchange removes a test's exchange.
func deleteExchange(u, name string) {
	conn, err := amqp.Dial(u)
	if err != nil {
		return
	}
	defer conn.Close()
	if ch, err := conn.Channel(); err == nil {
		_ = ch.ExchangeDelete(name, false, false)
	}
}

func bigPayload(n int) []byte {
	return []byte(`{"pad":"` + strings.Repeat("x", n) + `"}`)
}
