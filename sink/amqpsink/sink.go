package amqpsink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

var _ sink.Sink = (*Sink)(nil)

// precheck says whether a message may still be published.
var precheck = sinkkit.Precheck{Sink: sinkName}

// maxInFlight is the most messages awaiting a confirmation at once.
const maxInFlight = 1024

// Sink publishes events to a RabbitMQ exchange with publisher confirms.
// It is safe for concurrent use.
type Sink struct {
	cfg      Config
	shownURL string
	router   *sink.Router
	maxSize  atomic.Int64 // Config.MaxMessageSize, lowered to what the broker says
	slots    chan struct{}

	cur     atomic.Pointer[session] // nil while reconnecting
	lastErr atomic.Pointer[error]   // why the last connection attempt failed
	health  *sinkkit.Reachability
	tried   chan struct{} // closed once the first connection attempt has finished

	stop     chan struct{} // closed by Close: stops the reconnect loop
	life     context.Context
	endLife  context.CancelFunc // cancels a dial in progress at Close
	loopDone chan struct{}

	calls sinkkit.Calls // Publish calls in progress
}

// New returns a sink for the broker at cfg.URL. It fails only on a
// configuration error: it connects in the background, declares the
// exchange if it is absent and opens a confirm-mode channel, and dials
// again whenever the connection or channel closes, until Close. While it
// is not connected, Publish fails at once with a retryable error (a call
// made before the first attempt has finished waits for it); the first
// failed attempt is logged at WARN. [Sink.Reachable] tells whether the
// broker was reached.
func New(ctx context.Context, cfg Config) (*Sink, error) {
	cfg = cfg.withDefaults()
	router, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &Sink{
		cfg:      cfg,
		shownURL: sinkkit.RedactURL(cfg.URL),
		router:   router,
		slots:    make(chan struct{}, maxInFlight),
		health:   sinkkit.NewReachability().Logging(cfg.Logger, sinkName, "broker", sinkkit.RedactURL(cfg.URL)),
		tried:    make(chan struct{}),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	s.maxSize.Store(int64(cfg.MaxMessageSize))
	s.life, s.endLife = context.WithCancel(context.WithoutCancel(ctx))
	go s.connectLoop()
	return s, nil
}

// connectLoop dials, waits for the session to die and dials again, with
// a pause that grows from ReconnectWait to ten times it while the broker
// stays away, until Close.
func (s *Sink) connectLoop() {
	defer close(s.loopDone)
	log := s.cfg.Logger
	var once sync.Once
	firstDone := func() { once.Do(func() { close(s.tried) }) }
	defer firstDone()
	lost := false // a session was lost: pause before the first redial
	for {
		var ss *session
		wait := s.cfg.ReconnectWait
		for attempt := 1; ss == nil; attempt++ {
			if lost || attempt > 1 {
				if !sinkkit.Pause(s.stop, wait) {
					return
				}
				wait = min(2*wait, 10*s.cfg.ReconnectWait)
			}
			next, err := s.dial(s.life)
			if err != nil {
				s.lastErr.Store(&err)
				s.health.Failed(err)
				firstDone()
				continue
			}
			ss = next
			s.lastErr.Store(nil)
			s.cur.Store(ss)
			s.health.Reached()
			firstDone()
		}
		select {
		case <-s.stop:
			ss.close()
			return
		case <-ss.dead:
		}
		s.cur.CompareAndSwap(ss, nil)
		s.health.Down(fmt.Errorf("amqp sink: %s: connection lost: %w", s.shownURL, ss.deadErr))
		log.Warn("amqp sink: connection to the broker lost; reconnecting", "broker", s.shownURL, "err", ss.deadErr)
		ss.close()
		lost = true
	}
}

// Reachable implements [sink.Health]: ok while a confirm-mode channel to
// the broker is open.
func (s *Sink) Reachable() (ok bool, lastErr error, since time.Time) { return s.health.Reachable() }

// Destination implements [sink.Destinations]: the exchange and the
// routing key of m, as "exchange/routing-key".
func (s *Sink) Destination(m *outbox.Message) string {
	return s.cfg.Exchange + "/" + s.router.Route(m)
}

// Publish sends msgs (persistent, mandatory) and waits for their publisher
// confirms. Events of different aggregates are in flight together; the
// events of one aggregate go one at a time, each after the previous one's
// confirmation, so that a nack or a return can never leave a later event
// queued ahead of an earlier one. Once an event fails, the later events
// of its aggregate are not sent and report [outbox.ErrNotAttempted].
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if res := precheck.Enter(ctx, &s.calls, msgs); res != nil {
		return res
	}
	defer s.calls.Exit()
	if s.cur.Load() == nil {
		// Before the first connection attempt has finished, wait for it.
		select {
		case <-s.tried:
		case <-ctx.Done():
		}
	}
	return precheck.SendByKey(ctx, msgs, 0, func(i int) error { return s.publishOne(ctx, &msgs[i]) })
}

// publishOne sends m and waits for its confirmation.
func (s *Sink) publishOne(ctx context.Context, m *outbox.Message) error {
	if err := precheck.Check(ctx, m, nil, time.Now()); err != nil {
		return err
	}
	key := s.router.Route(m)
	if reason := checkRoutingKey(key); reason != "" {
		return s.router.Invalid(sinkName, "routing key", m, key, reason)
	}
	prefix := fmt.Sprintf("amqp sink: event %s to exchange %q with routing key %q", m.EventID, s.cfg.Exchange, key)
	if limit := s.maxSize.Load(); int64(len(m.Payload)) > limit {
		return outbox.Permanent(fmt.Errorf("%s: the payload of %d bytes exceeds the broker's max message size of %d bytes (max_message_size)", prefix, len(m.Payload), limit))
	}
	ss := s.cur.Load()
	if ss == nil {
		cause := errors.New("reconnecting")
		if e := s.lastErr.Load(); e != nil {
			cause = *e
		}
		return outbox.Retryable(fmt.Errorf("%s: not connected to the broker: %w", prefix, cause), 0)
	}
	if reason := ss.blocked.Load(); reason != nil {
		return outbox.Retryable(fmt.Errorf("%s: the broker blocks publishing (%s)", prefix, *reason), 0)
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	case <-ctx.Done():
		return precheck.NotSent(m, sinkkit.ReasonContextEnded, ctx.Err())
	}
	headers, contentType, body, err := s.encode(m)
	if err != nil {
		return outbox.Permanent(fmt.Errorf("%s: %w", prefix, err))
	}
	w, err := ss.publish(s.cfg.Exchange, key, amqp.Publishing{
		Headers:      headers,
		ContentType:  contentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.EventID.String(),
		Type:         m.EventType,
		Timestamp:    m.CreatedAt,
		AppId:        "outbox",
		Body:         body,
	})
	if err != nil {
		return outbox.Retryable(fmt.Errorf("%s: the channel is closed: %w", prefix, err), 0)
	}
	timer := time.NewTimer(s.cfg.PublishTimeout)
	defer timer.Stop()
	select {
	case res := <-w.done:
		if res.closed == nil {
			s.recordReceipt(ctx, m, key, w, res)
		}
		return s.result(prefix, w, res)
	case <-timer.C:
		return outbox.Retryable(fmt.Errorf("%s: no publisher confirm within %s", prefix, s.cfg.PublishTimeout), 0)
	case <-ctx.Done():
		return outbox.Retryable(fmt.Errorf("%s: gave up waiting for the publisher confirm: %w", prefix, ctx.Err()), 0)
	}
}

// recordReceipt records the broker's confirmation of m (an ack or a nack,
// and a return when it could not route it).
func (s *Sink) recordReceipt(ctx context.Context, m *outbox.Message, key string, w *confirmWait, res confirmResult) {
	a := &sink.AMQPReceipt{Exchange: s.cfg.Exchange, RoutingKey: key, DeliveryTag: w.tag, Acked: res.ack}
	if res.returned != nil {
		a.Returned = fmt.Sprintf("%d %s", res.returned.ReplyCode, res.returned.ReplyText)
	}
	sink.RecordReceipt(ctx, m, &sink.Receipt{Kind: "amqp", Destination: s.cfg.Exchange + "/" + key, AnsweredAt: time.Now().UTC(), AMQP: a})
}

// result classifies a confirmation.
func (s *Sink) result(prefix string, w *confirmWait, res confirmResult) error {
	switch {
	case res.closed != nil:
		if limit, ok := brokerSizeLimit(res.closed); ok {
			if int64(limit) < s.maxSize.Load() {
				s.maxSize.Store(int64(limit))
				s.cfg.Logger.Warn("amqp sink: the broker refused an oversized message; lowering the limit to its max_message_size",
					"max_message_size", limit)
			}
			if w.size > limit {
				return outbox.Permanent(fmt.Errorf("%s: the broker refused the payload of %d bytes: %w", prefix, w.size, res.closed))
			}
		}
		return outbox.Retryable(fmt.Errorf("%s: the channel closed before the broker confirmed: %w", prefix, res.closed), 0)
	case res.returned != nil:
		return outbox.Retryable(fmt.Errorf("%s: unroutable: the broker returned it (%d %s): bind a queue to the exchange for this routing key",
			prefix, res.returned.ReplyCode, res.returned.ReplyText), 0)
	case !res.ack:
		return outbox.Retryable(fmt.Errorf("%s: the broker nacked it (it could not take the message, e.g. a full queue rejecting publishes)", prefix), 0)
	}
	return nil
}

// Close makes later Publish calls fail with [outbox.ErrClosed], waits for
// the calls in flight to get their confirmations, then closes the channel
// and the connection. If ctx ends first, it closes them at once and
// returns ctx's error.
func (s *Sink) Close(ctx context.Context) error {
	var err error
	if s.calls.Close() {
		if werr := s.calls.Wait(ctx); werr != nil {
			err = fmt.Errorf("amqp sink: close: publishes still in flight: %w", werr)
		}
		close(s.stop)
		s.endLife()
	}
	select {
	case <-s.loopDone:
	case <-ctx.Done():
		if err == nil {
			err = fmt.Errorf("amqp sink: close: %w", ctx.Err())
		}
	}
	return err
}

// checkRoutingKey returns why key cannot be a routing key, or "": AMQP
// 0-9-1 carries it as a short string (at most 255 bytes), and RabbitMQ
// matches topic bindings on UTF-8 text.
func checkRoutingKey(key string) string {
	switch {
	case len(key) > 255:
		return fmt.Sprintf("it is %d bytes long; AMQP allows 255", len(key))
	case !utf8.ValidString(key):
		return "it is not valid UTF-8"
	}
	return ""
}

// headerCEPrefix starts the CloudEvents attributes in the headers: the
// AMQP binding's application-properties prefix, which RabbitMQ carries
// as AMQP 0-9-1 headers.
const headerCEPrefix = "cloudEvents:"

// encode returns the headers, the content type and the body of m in the
// sink's format. The outbox headers and the event's own are in every
// format; an event header that would be read as a CloudEvents attribute
// is dropped in the CloudEvents formats.
func (s *Sink) encode(m *outbox.Message) (amqp.Table, string, []byte, error) {
	ce := s.cfg.Format.IsCloudEvents()
	headers := amqp.Table{}
	for _, kv := range sinkkit.BrokerHeaders(m) {
		if ce && strings.HasPrefix(strings.ToLower(kv[0]), strings.ToLower(headerCEPrefix)) {
			continue
		}
		headers[kv[0]] = kv[1]
	}
	switch s.cfg.Format {
	case sinkkit.FormatCloudEvents:
		for _, a := range sinkkit.CloudEventAttributes(m, s.cfg.Source) {
			headers[headerCEPrefix+a.Name] = a.Value
		}
	case sinkkit.FormatCloudEventsStructured:
		body, err := sinkkit.CloudEventJSON(m, s.cfg.Source)
		return headers, sinkkit.CloudEventsJSON, body, err
	}
	return headers, "application/json", m.Payload, nil
}
