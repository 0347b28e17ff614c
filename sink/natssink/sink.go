package natssink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

var _ sink.Sink = (*Sink)(nil)

// precheck says whether a message may still be published.
var precheck = sinkkit.Precheck{Sink: sinkName}

// Sink publishes events to NATS JetStream. It is safe for concurrent use.
type Sink struct {
	cfg    Config
	router *sink.Router
	nc     *nats.Conn
	js     jetstream.JetStream
	closed chan struct{} // closed by the connection's ClosedHandler
	server string        // cfg.URL as logs show it

	// health is the server's reachability; jsReady is set once JetStream
	// answered on some connection (checkMu serializes that check).
	health  *sinkkit.Reachability
	jsReady atomic.Bool
	checkMu sync.Mutex
	// connected is signalled by the connection handlers; stop ends the
	// watcher goroutine, which closes watchDone.
	connected chan struct{}
	stop      chan struct{}
	watchDone chan struct{}

	// known holds the subject patterns of the streams in use; streamMu
	// serializes looking subjects up and creating streams.
	known    knownSubjects
	streamMu sync.Mutex

	// slots bounds the messages awaiting a PubAck, across calls.
	slots chan struct{}

	calls sinkkit.Calls // Publish calls in progress
}

// maxInFlight is the most messages awaiting a PubAck at once, below
// nats.go's limit on pending asynchronous publishes (4000), so that a
// batch of many aggregates never stalls the client.
const maxInFlight = 1024

// New returns a sink for the server named by cfg.URL. It fails only on a
// configuration error: the connection is made in the background and
// retried every cfg.ReconnectWait, forever, until Close; the first
// failure is logged at WARN. Until the server is reached and JetStream
// has answered, Publish fails every message at once with a retryable
// error that says why; [Sink.Reachable] tells whether it was reached.
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
		cfg: cfg, router: router, server: sinkkit.RedactURL(cfg.URL),
		closed: make(chan struct{}), slots: make(chan struct{}, maxInFlight),
		health:    sinkkit.NewReachability().Logging(cfg.Logger, sinkName, "server", sinkkit.RedactURL(cfg.URL)),
		connected: make(chan struct{}, 1),
		stop:      make(chan struct{}),
		watchDone: make(chan struct{}),
	}
	log := cfg.Logger
	opts := []nats.Option{
		nats.Name(cfg.ClientName),
		nats.Timeout(cfg.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		// Keep trying after the server refused the credentials twice:
		// they may be fixed on the server, and the sink must not end up
		// closed for good while the relay runs.
		nats.IgnoreAuthErrorAbort(),
		nats.ReconnectWait(cfg.ReconnectWait),
		nats.ReconnectJitter(cfg.ReconnectWait/4, cfg.ReconnectWait/4),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				s.health.Down(fmt.Errorf("nats sink: %s: disconnected: %w", s.server, err))
				log.Warn("nats sink: disconnected; reconnecting", "server", s.server, "err", err)
			}
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { s.connectFailed(err) }),
		nats.ConnectHandler(func(*nats.Conn) { s.signalConnected() }),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats sink: reconnected", "server", sinkkit.RedactURL(c.ConnectedUrlRedacted()))
			s.signalConnected()
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(s.closed) }),
	}
	if cfg.ReconnectBufSize != 0 {
		opts = append(opts, nats.ReconnectBufSize(cfg.ReconnectBufSize))
	}
	opts = append(opts, cfg.Options...)
	// With RetryOnFailedConnect, Connect fails only on a bad option; a
	// server that cannot be reached leaves the connection reconnecting.
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, sink.Invalid(sinkName, "%s: %v", s.server, err)
	}
	s.nc = nc
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats sink: %w", err)
	}
	s.js = js
	if nc.IsConnected() {
		s.signalConnected()
	} else {
		// The connection reports the first attempt's error on its own
		// goroutine, which may have run already: a refusal of the
		// credentials must not be overwritten with this vaguer one.
		s.health.DownIfUntried(fmt.Errorf("nats sink: %s: %w", s.server, nats.ErrNoServers))
	}
	go s.watch()
	return s, nil
}

func (s *Sink) signalConnected() {
	select {
	case s.connected <- struct{}{}:
	default:
	}
}

// noteRefusal records the connection's last error while it is not
// connected, unless it is the error already recorded.
func (s *Sink) noteRefusal() {
	if s.nc.IsConnected() {
		return
	}
	err := s.nc.LastError()
	if err == nil {
		return
	}
	if _, cause, _ := s.health.Reachable(); cause != nil && strings.HasSuffix(cause.Error(), err.Error()) {
		return
	}
	s.connectFailed(err)
}

// connectFailed records a failed connection attempt.
func (s *Sink) connectFailed(err error) {
	s.health.Failed(fmt.Errorf("nats sink: %s: %w", s.server, err))
}

// watch checks JetStream whenever the connection is (re)established,
// retrying with a growing pause while it does not answer, until Close.
//
// While the connection is down, it also records the connection's own last
// error every ReconnectWait: nats.go passes a failed dial to the
// ReconnectErrHandler, but a server that answers and then refuses (wrong
// credentials, an expired token) reaches no handler, only LastError.
func (s *Sink) watch() {
	defer close(s.watchDone)
	tick := time.NewTicker(max(s.cfg.ReconnectWait, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			s.noteRefusal()
			continue
		case <-s.connected:
		}
		wait := s.cfg.ReconnectWait
		for s.nc.IsConnected() {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ConnectTimeout)
			err := s.ready(ctx)
			cancel()
			if err == nil {
				break
			}
			if !sinkkit.Pause(s.stop, wait) {
				return
			}
			wait = min(2*wait, 10*s.cfg.ReconnectWait)
		}
	}
}

// ready returns nil once the server was reached and JetStream answered,
// checking now if the connection is up; otherwise a retryable error that
// says why the sink cannot publish.
func (s *Sink) ready(ctx context.Context) error {
	if s.jsReady.Load() {
		if s.nc.IsConnected() {
			s.health.Reached()
		}
		return nil
	}
	if !s.nc.IsConnected() {
		return s.notConnected()
	}
	s.checkMu.Lock()
	defer s.checkMu.Unlock()
	if s.jsReady.Load() {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	if _, err := s.js.AccountInfo(actx); err != nil {
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			err = fmt.Errorf("nats sink: %s: JetStream is not enabled (start nats-server with -js): %w", s.server, err)
		} else {
			err = fmt.Errorf("nats sink: %s: JetStream did not answer: %w", s.server, err)
		}
		s.health.Failed(err)
		return outbox.Retryable(err, 0)
	}
	s.jsReady.Store(true)
	s.health.Reached()
	return nil
}

// notConnected is the error of a publish before the server was reached.
func (s *Sink) notConnected() error {
	_, cause, _ := s.health.Reachable()
	if cause == nil {
		cause = fmt.Errorf("nats sink: %s: connecting", s.server)
	}
	return outbox.Retryable(fmt.Errorf("not connected to NATS yet (the sink keeps trying): %w", cause), 0)
}

// Reachable implements [sink.Health]: ok once the server was reached and
// JetStream answered, and while the connection is up.
func (s *Sink) Reachable() (ok bool, lastErr error, since time.Time) { return s.health.Reachable() }

// Destination implements [sink.Destinations]: the subject of m.
func (s *Sink) Destination(m *outbox.Message) string { return s.router.Route(m) }

// Publish sends msgs and waits for their PubAcks. Events of different
// aggregates are in flight together; the events of one aggregate go one
// at a time, each after the previous one's PubAck, so that a failure can
// never leave a later event stored ahead of an earlier one. Once an event
// fails, the later events of its aggregate are not sent and report
// [outbox.ErrNotAttempted].
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if res := precheck.Enter(ctx, &s.calls, msgs); res != nil {
		return res
	}
	defer s.calls.Exit()
	if err := s.ready(ctx); err != nil {
		out := make([]error, len(msgs))
		for i := range msgs {
			out[i] = fmt.Errorf("nats sink: event %s: %w", msgs[i].EventID, err)
		}
		return out
	}

	// Route every message, check each subject once, and make sure a
	// stream captures it.
	subjects := make([]string, len(msgs))
	subjectErr := map[string]error{}
	badSubject := map[string]string{} // subject -> why it is refused
	for i := range msgs {
		subj := s.router.Route(&msgs[i])
		subjects[i] = subj
		if _, seen := subjectErr[subj]; seen {
			continue
		}
		if _, seen := badSubject[subj]; seen {
			continue
		}
		if err := checkPublishSubject(subj); err != nil {
			badSubject[subj] = err.Error()
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
		if reason, bad := badSubject[subjects[i]]; bad {
			return s.router.Invalid(sinkName, "subject", &msgs[i], subjects[i], reason)
		}
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
		return precheck.NotSent(m, sinkkit.ReasonContextEnded, ctx.Err())
	}
	msg, err := s.message(m, subject)
	if err != nil {
		return outbox.Permanent(fmt.Errorf("nats sink: %w", err))
	}
	paf, err := s.js.PublishMsgAsync(msg)
	if err != nil {
		return s.classify(m, subject, err)
	}
	select {
	case ack := <-paf.Ok():
		if ack != nil {
			sink.RecordReceipt(ctx, m, &sink.Receipt{Kind: "jetstream", Destination: subject, AnsweredAt: time.Now().UTC(),
				JetStream: &sink.JetStreamReceipt{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}})
		}
		return nil
	case err := <-paf.Err():
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			s.known.forget(subject) // look the stream up again next time
		}
		var api *jetstream.APIError
		if errors.As(err, &api) {
			// The server refused it: that is an answer too.
			sink.RecordReceipt(ctx, m, &sink.Receipt{Kind: "jetstream", Destination: subject, AnsweredAt: time.Now().UTC(),
				JetStream: &sink.JetStreamReceipt{Error: fmt.Sprintf("%d %s", api.ErrorCode, api.Description)}})
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
	close(s.stop)
	<-s.watchDone
	if err := s.calls.Wait(ctx); err != nil {
		s.nc.Close()
		return fmt.Errorf("nats sink: close: publishes still in flight: %w", err)
	}
	if !s.nc.IsConnected() {
		s.nc.Close() // nothing to drain
	} else if err := s.nc.Drain(); err != nil {
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

// Header names of the CloudEvents formats (the NATS binding).
const (
	headerContentType = "content-type"
	headerCEPrefix    = "ce-"
)

// message builds the NATS message of m in the sink's format: the outbox
// headers and the event's own, Nats-Msg-Id = the event id, and in the
// CloudEvents formats the ce-* attributes (binary) or the CloudEvent in
// JSON as the data (structured), with content-type. An event header that
// would be read as a CloudEvents header is dropped in those formats.
func (s *Sink) message(m *outbox.Message, subject string) (*nats.Msg, error) {
	hdr := make(nats.Header, 16+len(m.Headers))
	ce := s.cfg.Format.IsCloudEvents()
	for _, kv := range sinkkit.BrokerHeaders(m) {
		if k := strings.ToLower(kv[0]); ce && (k == headerContentType || strings.HasPrefix(k, headerCEPrefix)) {
			continue
		}
		hdr[kv[0]] = []string{kv[1]}
	}
	hdr[jetstream.MsgIDHeader] = []string{m.EventID.String()}
	data := []byte(m.Payload)
	switch s.cfg.Format {
	case sinkkit.FormatCloudEvents:
		for _, a := range sinkkit.CloudEventAttributes(m, s.cfg.Source) {
			hdr[headerCEPrefix+a.Name] = []string{a.Value}
		}
		hdr[headerContentType] = []string{"application/json"}
	case sinkkit.FormatCloudEventsStructured:
		var err error
		if data, err = sinkkit.CloudEventJSON(m, s.cfg.Source); err != nil {
			return nil, err
		}
		hdr[headerContentType] = []string{sinkkit.CloudEventsJSON}
	}
	return &nats.Msg{Subject: subject, Header: hdr, Data: data}, nil
}
