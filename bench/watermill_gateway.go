package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/outbox/internal/benchkit"
)

// The gateway scenario's topics: the producer publishes to gatewayTopic
// through forwarder.Publisher, which writes an envelope to the SQL table
// of forwarderTopic; the forwarder unwraps it and publishes it to
// gatewayTopic on the HTTP publisher.
const (
	forwarderTopic = "forwarder"
	gatewayTopic   = "gateway"
)

var _ benchkit.GatewaySystem = (*Watermill)(nil)

// GatewayLoad publishes events through watermill's forwarder publisher
// (the outbox side of its forwarder component), 1000 per multi-row
// INSERT into the forwarder topic's table.
func (w *Watermill) GatewayLoad(_ context.Context, events []benchkit.Event) error {
	pub := forwarder.NewPublisher(w.loader, forwarder.PublisherConfig{ForwarderTopic: forwarderTopic})
	return publishChunks(pub, gatewayTopic, events)
}

// GatewayPending counts the forwarder topic's messages not acked.
func (w *Watermill) GatewayPending(ctx context.Context) (int64, error) {
	var n int64
	err := w.pool.QueryRow(ctx, `SELECT count(*) FROM `+w.schema.MessagesTable(forwarderTopic)+` WHERE NOT acked`).Scan(&n)
	return n, err
}

// StartGateway runs target.Relays forwarders (forwarder.NewForwarder),
// each as a separate process would: its own pool and SQL subscriber on
// the forwarder topic, with the same schema and offsets adapter as the
// other scenarios, and its own HTTP publisher to target.URL.
func (w *Watermill) StartGateway(ctx context.Context, target benchkit.GatewayTarget) (func() error, error) {
	ctx, cancel := context.WithCancel(ctx)
	type running struct {
		fwd  *forwarder.Forwarder
		done chan error
	}
	var (
		fwds    []running
		closers []func()
	)
	stop := func() error {
		var errs []error
		for _, f := range fwds {
			errs = append(errs, f.fwd.Close())
		}
		for _, f := range fwds {
			errs = append(errs, <-f.done)
		}
		cancel()
		for _, c := range closers {
			c()
		}
		return errors.Join(errs...)
	}
	fail := func(err error) (func() error, error) {
		_ = stop()
		return nil, err
	}
	for range target.Relays {
		pool, err := w.env.NewPool(ctx, 2)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, pool.Close)
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(pool), wsql.SubscriberConfig{
			SchemaAdapter: w.schema, OffsetsAdapter: w.offsets, PollInterval: w.PollInterval,
		}, wmLogger)
		if err != nil {
			return fail(err)
		}
		pub := newHTTPPublisher(target.URL)
		closers = append(closers, func() { _ = pub.Close() })
		fwd, err := forwarder.NewForwarder(sub, pub, wmLogger, forwarder.Config{ForwarderTopic: forwarderTopic})
		if err != nil {
			_ = sub.Close()
			return fail(err)
		}
		r := running{fwd: fwd, done: make(chan error, 1)}
		fwds = append(fwds, r)
		go func() { r.done <- fwd.Run(ctx) }()
		select {
		case <-fwd.Running():
		case err := <-r.done:
			r.done <- err
			return fail(fmt.Errorf("forwarder stopped at start: %w", err))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	return stop, nil
}

// httpPublisher is the smallest message.Publisher that delivers over
// HTTP: it POSTs each message's payload, as the body, to one URL, one
// message after another, and fails on anything but a 2xx answer. The
// modules this benchmark may use have no HTTP publisher of watermill's
// own.
type httpPublisher struct {
	url    string
	client *http.Client
}

var _ message.Publisher = (*httpPublisher)(nil)

func newHTTPPublisher(url string) *httpPublisher {
	return &httpPublisher{url: url, client: &http.Client{Timeout: 10 * time.Second}}
}

// Publish POSTs every message, in order; the topic is not sent.
func (p *httpPublisher) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		req, err := http.NewRequestWithContext(m.Context(), http.MethodPost, p.url, bytes.NewReader(m.Payload))
		if err != nil {
			return fmt.Errorf("http publisher: %w", err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := p.client.Do(req)
		if err != nil {
			return fmt.Errorf("http publisher: %w", err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("http publisher: %s answered %s", p.url, resp.Status)
		}
	}
	return nil
}

// Close closes the idle connections.
func (p *httpPublisher) Close() error {
	p.client.CloseIdleConnections()
	return nil
}
