package natssink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

var _ sink.Sink = (*Sink)(nil)

// precheck says whether a message may still be published.
var precheck = sink.Precheck{Sink: sinkName}

// Sink publishes events to NATS JetStream. It is safe for concurrent use.
type Sink struct {
	cfg    Config
	router *sink.Router
	nc     *nats.Conn
	js     jetstream.JetStream
	closed chan struct{} // closed by the connection's ClosedHandler

	// known holds the subject patterns of the streams in use; streamMu
	// serializes looking subjects up and creating streams.
	known    knownSubjects
	streamMu sync.Mutex

	// slots bounds the messages awaiting a PubAck, across calls.
	slots chan struct{}

	calls sink.Calls // Publish calls in progress
}

// maxInFlight is the most messages awaiting a PubAck at once, below
// nats.go's limit on pending asynchronous publishes (4000), so that a
// batch of many aggregates never stalls the client.
const maxInFlight = 1024

// New connects to the server named by cfg.URL and returns a sink. It
// fails if the server cannot be reached within cfg.ConnectTimeout or does
// not have JetStream enabled; once connected, the sink reconnects on its
// own, forever, until Close.
func New(ctx context.Context, cfg Config) (*Sink, error) {
	cfg = cfg.withDefaults()
	router, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, router: router, closed: make(chan struct{}), slots: make(chan struct{}, maxInFlight)}
	log := cfg.Logger
	server := sink.RedactURL(cfg.URL)
	opts := []nats.Option{
		nats.Name(cfg.ClientName),
		nats.Timeout(cfg.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(cfg.ReconnectWait),
		nats.ReconnectJitter(cfg.ReconnectWait/4, cfg.ReconnectWait/4),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats sink: disconnected; reconnecting", "server", server, "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats sink: reconnected", "server", sink.RedactURL(c.ConnectedUrlRedacted()))
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(s.closed) }),
	}
	if cfg.ReconnectBufSize != 0 {
		opts = append(opts, nats.ReconnectBufSize(cfg.ReconnectBufSize))
	}
	opts = append(opts, cfg.Options...)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats sink: connect to %s: %w", server, err)
	}
	s.nc = nc
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats sink: %w", err)
	}
	s.js = js
	actx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if _, err := js.AccountInfo(actx); err != nil {
		nc.Close()
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return nil, fmt.Errorf("nats sink: %s: JetStream is not enabled (start nats-server with -js): %w", server, err)
		}
		return nil, fmt.Errorf("nats sink: %s: JetStream did not answer: %w", server, err)
	}
	return s, nil
}

// Publish sends msgs and waits for their PubAcks. Events of different
// aggregates are in flight together; the events of one aggregate go one
// at a time, each after the previous one's PubAck, so that a failure can
// never leave a later event stored ahead of an earlier one. Once an event
// fails, the later events of its aggregate are not sent and report
// [outbox.ErrNotAttempted].
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if !s.calls.Enter() {
		return sink.Fill(len(msgs), fmt.Errorf("nats sink: %w", outbox.ErrClosed))
	}
	defer s.calls.Exit()

	// Route every message and make sure a stream captures each subject.
	subjects := make([]string, len(msgs))
	subjectErr := map[string]error{}
	for i := range msgs {
		subj := s.router.Route(&msgs[i])
		subjects[i] = subj
		if _, seen := subjectErr[subj]; seen {
			continue
		}
		if err := checkPublishSubject(subj); err != nil {
			subjectErr[subj] = outbox.Permanent(fmt.Errorf("nats sink: invalid subject %q from the route: %v", subj, err))
			continue
		}
		subjectErr[subj] = nil
		if s.known.covers(subj) || ctx.Err() != nil {
			continue
		}
		subjectErr[subj] = s.ensureSubject(ctx, subj)
	}

	// One goroutine per ordering key, in the order the keys first appear.
	return precheck.SendByKey(ctx, msgs, 0, func(i int) error {
		if err := subjectErr[subjects[i]]; err != nil {
			return err
		}
		return s.publishOne(ctx, &msgs[i], subjects[i])
	})
}

// publishOne sends m and waits for its PubAck.
func (s *Sink) publishOne(ctx context.Context, m *outbox.Message, subject string) error {
	if err := precheck.Check(ctx, m, nil, time.Now()); err != nil {
		return err
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	case <-ctx.Done():
		return precheck.NotSent(m, sink.ReasonContextEnded, ctx.Err())
	}
	hdr := make(nats.Header, 6+len(m.Headers))
	for _, kv := range sink.BrokerHeaders(m) {
		hdr[kv[0]] = []string{kv[1]}
	}
	hdr[jetstream.MsgIDHeader] = []string{m.EventID.String()}
	paf, err := s.js.PublishMsgAsync(&nats.Msg{Subject: subject, Header: hdr, Data: m.Payload})
	if err != nil {
		return s.classify(m, subject, err)
	}
	select {
	case <-paf.Ok():
		return nil
	case err := <-paf.Err():
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			s.known.forget(subject) // look the stream up again next time
		}
		return s.classify(m, subject, err)
	case <-ctx.Done():
		return s.classify(m, subject, ctx.Err())
	}
}

// Close makes later Publish calls fail with [outbox.ErrClosed], waits for
// the calls in flight to get their PubAcks, then drains and closes the
// connection. If ctx ends first, the connection is closed at once and
// ctx's error returned.
func (s *Sink) Close(ctx context.Context) error {
	if !s.calls.Close() {
		select {
		case <-s.closed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := s.calls.Wait(ctx); err != nil {
		s.nc.Close()
		return fmt.Errorf("nats sink: close: publishes still in flight: %w", err)
	}
	if err := s.nc.Drain(); err != nil {
		s.nc.Close()
	}
	select {
	case <-s.closed:
		return nil
	case <-ctx.Done():
		s.nc.Close()
		return fmt.Errorf("nats sink: close: drain did not finish: %w", ctx.Err())
	}
}
