package amqpsink

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

var _ sink.Sink = (*Sink)(nil)

// precheck says whether a message may still be published.
var precheck = sink.Precheck{Sink: sinkName}

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

	stop     chan struct{} // closed by Close: stops the reconnect loop
	life     context.Context
	endLife  context.CancelFunc // cancels a dial in progress at Close
	loopDone chan struct{}

	calls sink.Calls // Publish calls in progress
}

// New connects to the broker, declares the exchange if it is absent and
// opens a confirm-mode channel. It fails if that does not work within
// cfg.ConnectTimeout; once connected, the sink reconnects on its own
// whenever the connection or channel closes, until Close.
func New(ctx context.Context, cfg Config) (*Sink, error) {
	cfg = cfg.withDefaults()
	router, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Sink{
		cfg:      cfg,
		shownURL: sink.RedactURL(cfg.URL),
		router:   router,
		slots:    make(chan struct{}, maxInFlight),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	s.maxSize.Store(int64(cfg.MaxMessageSize))
	ss, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.life, s.endLife = context.WithCancel(context.WithoutCancel(ctx))
	s.cur.Store(ss)
	go s.reconnectLoop(ss)
	return s, nil
}

// reconnectLoop waits for the session to die and dials a new one, with a
// growing pause, until Close.
func (s *Sink) reconnectLoop(ss *session) {
	defer close(s.loopDone)
	log := s.cfg.Logger
	for {
		select {
		case <-s.stop:
			ss.close()
			return
		case <-ss.dead:
		}
		s.cur.CompareAndSwap(ss, nil)
		log.Warn("amqp sink: connection to the broker lost; reconnecting", "broker", s.shownURL, "err", ss.deadErr)
		ss.close()
		wait := s.cfg.ReconnectWait
		for attempt := 1; ; attempt++ {
			t := time.NewTimer(wait)
			select {
			case <-s.stop:
				t.Stop()
				return
			case <-t.C:
			}
			next, err := s.dial(s.life)
			if err == nil {
				ss = next
				s.lastErr.Store(nil)
				s.cur.Store(ss)
				log.Info("amqp sink: reconnected", "broker", s.shownURL, "attempts", attempt)
				break
			}
			s.lastErr.Store(&err)
			if attempt == 1 || attempt%20 == 0 {
				log.Warn("amqp sink: reconnect failed; retrying", "broker", s.shownURL, "attempt", attempt, "err", err)
			}
			wait = min(2*wait, 10*s.cfg.ReconnectWait)
		}
	}
}

// Publish sends msgs (persistent, mandatory) and waits for their publisher
// confirms. Events of different aggregates are in flight together; the
// events of one aggregate go one at a time, each after the previous one's
// confirmation, so that a nack or a return can never leave a later event
// queued ahead of an earlier one. Once an event fails, the later events
// of its aggregate are not sent and report [outbox.ErrNotAttempted].
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if !s.calls.Enter() {
		return sink.Fill(len(msgs), fmt.Errorf("amqp sink: %w", outbox.ErrClosed))
	}
	defer s.calls.Exit()
	return precheck.SendByKey(ctx, msgs, 0, func(i int) error { return s.publishOne(ctx, &msgs[i]) })
}

// publishOne sends m and waits for its confirmation.
func (s *Sink) publishOne(ctx context.Context, m *outbox.Message) error {
	if err := precheck.Check(ctx, m, nil, time.Now()); err != nil {
		return err
	}
	key := s.router.Route(m)
	prefix := fmt.Sprintf("amqp sink: event %s to exchange %q with routing key %q", m.EventID, s.cfg.Exchange, key)
	if len(key) > 255 {
		return outbox.Permanent(fmt.Errorf("%s: the routing key is %d bytes; AMQP allows 255", prefix, len(key)))
	}
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
		return precheck.NotSent(m, sink.ReasonContextEnded, ctx.Err())
	}
	headers := amqp.Table{}
	for _, kv := range sink.BrokerHeaders(m) {
		headers[kv[0]] = kv[1]
	}
	w, err := ss.publish(s.cfg.Exchange, key, amqp.Publishing{
		Headers:      headers,
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    m.EventID.String(),
		Type:         m.EventType,
		Timestamp:    m.CreatedAt,
		AppId:        "outbox",
		Body:         m.Payload,
	})
	if err != nil {
		return outbox.Retryable(fmt.Errorf("%s: the channel is closed: %w", prefix, err), 0)
	}
	timer := time.NewTimer(s.cfg.PublishTimeout)
	defer timer.Stop()
	select {
	case res := <-w.done:
		return s.result(prefix, w, res)
	case <-timer.C:
		return outbox.Retryable(fmt.Errorf("%s: no publisher confirm within %s", prefix, s.cfg.PublishTimeout), 0)
	case <-ctx.Done():
		return outbox.Retryable(fmt.Errorf("%s: gave up waiting for the publisher confirm: %w", prefix, ctx.Err()), 0)
	}
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
