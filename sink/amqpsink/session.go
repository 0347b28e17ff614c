package amqpsink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// session is one connection and its confirm-mode channel. Its dispatcher
// goroutine owns the channel's confirmations and returns: the broker sends
// basic.return for an unroutable mandatory message before the message's
// basic.ack, amqp091 hands both over in that order, and the dispatcher
// drains the returns before it resolves each confirmation, so an
// unroutable message is never taken for delivered.
type session struct {
	conn *amqp.Connection
	ch   *amqp.Channel

	pubMu   sync.Mutex // makes "next delivery tag + publish" atomic
	mu      sync.Mutex // guards pending
	pending map[uint64]*confirmWait

	chClosed, connClosed chan *amqp.Error // why the channel, the connection closed
	blocked              atomic.Pointer[string]
	dead                 chan struct{} // closed once the channel is gone
	deadErr              error         // set before dead is closed
}

// confirmWait is one published message waiting for its confirmation.
type confirmWait struct {
	messageID string
	size      int
	tag       uint64             // the delivery tag of the publish on its channel
	done      chan confirmResult // buffered, receives exactly once
}

type confirmResult struct {
	ack      bool
	returned *amqp.Return
	closed   error // the channel closed before the confirmation
}

// dial connects, makes sure the exchange exists, and puts a channel into
// confirm mode.
func (s *Sink) dial(ctx context.Context) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(s.cfg.ConnectionName)
	dialer := &net.Dialer{Timeout: s.cfg.ConnectTimeout}
	conn, err := amqp.DialConfig(s.cfg.URL, amqp.Config{
		TLSClientConfig: s.cfg.TLS,
		Properties:      props,
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bound the handshake; amqp091 clears the deadline after it.
			if err := c.SetDeadline(time.Now().Add(s.cfg.ConnectTimeout)); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("amqp sink: connect to %s: %w", s.shownURL, err)
	}
	ch, err := s.declare(conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		conn.Close()
		return nil, fmt.Errorf("amqp sink: %s: put the channel into confirm mode: %w", s.shownURL, err)
	}
	ss := &session{
		conn:       conn,
		ch:         ch,
		pending:    map[uint64]*confirmWait{},
		chClosed:   make(chan *amqp.Error, 1),
		connClosed: make(chan *amqp.Error, 1),
		dead:       make(chan struct{}),
	}
	ch.NotifyClose(ss.chClosed)
	conn.NotifyClose(ss.connClosed)
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1024))
	returns := ch.NotifyReturn(make(chan amqp.Return, 1024))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go ss.dispatch(confirms, returns, blocks)
	return ss, nil
}

// declare returns a channel on which the exchange is known to exist: it
// checks with a passive declare and declares the exchange (topic, durable)
// only if that says it is absent, so an existing exchange needs no
// configure permission.
func (s *Sink) declare(conn *amqp.Connection) (*amqp.Channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp sink: %s: open a channel: %w", s.shownURL, err)
	}
	err = ch.ExchangeDeclarePassive(s.cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil)
	if err == nil {
		return ch, nil
	}
	var aerr *amqp.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp.NotFound {
		return nil, fmt.Errorf("amqp sink: %s: check exchange %q: %w", s.shownURL, s.cfg.Exchange, err)
	}
	// The passive declare closed the channel; declare on a new one.
	if ch, err = conn.Channel(); err != nil {
		return nil, fmt.Errorf("amqp sink: %s: open a channel: %w", s.shownURL, err)
	}
	if err := ch.ExchangeDeclare(s.cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("amqp sink: %s: declare exchange %q (topic, durable): %w", s.shownURL, s.cfg.Exchange, err)
	}
	s.cfg.Logger.Info("amqp sink: declared exchange", "exchange", s.cfg.Exchange, "type", "topic")
	return ch, nil
}

// dispatch resolves confirmations in delivery-tag order, each after the
// returns that preceded it, until the channel closes; then it fails what
// is still pending.
func (ss *session) dispatch(confirms <-chan amqp.Confirmation, returns <-chan amqp.Return, blocks <-chan amqp.Blocking) {
	returned := map[string]*amqp.Return{}
	take := func(r amqp.Return) { returned[r.MessageId] = &r }
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			take(r)
		case b, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			if b.Active {
				reason := b.Reason
				ss.blocked.Store(&reason)
			} else {
				ss.blocked.Store(nil)
			}
		case c, ok := <-confirms:
			if !ok {
				ss.fail()
				return
			}
			// A return is handed over before its message's confirmation.
		drain:
			for returns != nil {
				select {
				case r, ok := <-returns:
					if !ok {
						returns = nil
						break drain
					}
					take(r)
				default:
					break drain
				}
			}
			ss.mu.Lock()
			w := ss.pending[c.DeliveryTag]
			delete(ss.pending, c.DeliveryTag)
			ss.mu.Unlock()
			if w == nil {
				continue
			}
			res := confirmResult{ack: c.Ack}
			if r, ok := returned[w.messageID]; ok {
				res.returned = r
				delete(returned, w.messageID)
			}
			w.done <- res
		}
	}
}

// fail marks the session dead and resolves every pending wait with the
// reason the channel closed.
func (ss *session) fail() {
	var reason error = errors.New("channel closed")
	for _, c := range []chan *amqp.Error{ss.chClosed, ss.connClosed} {
		select {
		case e := <-c:
			if e != nil {
				reason = e
			}
		default:
		}
	}
	ss.mu.Lock()
	ss.deadErr = reason
	pending := ss.pending
	ss.pending = map[uint64]*confirmWait{}
	ss.mu.Unlock()
	close(ss.dead)
	for _, w := range pending {
		w.done <- confirmResult{closed: reason}
	}
}

// publish sends one message and registers its wait under its delivery
// tag. It returns nil and an error if the message was not sent.
func (ss *session) publish(exchange, key string, msg amqp.Publishing) (*confirmWait, error) {
	w := &confirmWait{messageID: msg.MessageId, size: len(msg.Body), done: make(chan confirmResult, 1)}
	ss.pubMu.Lock()
	defer ss.pubMu.Unlock()
	ss.mu.Lock()
	if ss.deadErr != nil {
		err := ss.deadErr
		ss.mu.Unlock()
		return nil, err
	}
	tag := ss.ch.GetNextPublishSeqNo()
	w.tag = tag
	ss.pending[tag] = w
	ss.mu.Unlock()
	if err := ss.ch.Publish(exchange, key, true, false, msg); err != nil {
		ss.mu.Lock()
		delete(ss.pending, tag)
		ss.mu.Unlock()
		return nil, err
	}
	return w, nil
}

func (ss *session) close() {
	_ = ss.ch.Close()
	_ = ss.conn.Close()
}

// sizeLimit finds the broker's max_message_size in the reason it gives for
// closing a channel over an oversized message, e.g. "PRECONDITION_FAILED -
// message size 2097152 is larger than configured max size 1048576".
var sizeLimit = regexp.MustCompile(`message size \d+ is larger than (?:configured )?max size (\d+)`)

func brokerSizeLimit(err error) (int, bool) {
	var aerr *amqp.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp.PreconditionFailed {
		return 0, false
	}
	m := sizeLimit.FindStringSubmatch(aerr.Reason)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil && n > 0
}
