package httpsink

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

var _ sink.Sink = (*Sink)(nil)

// sinkName starts the sink's errors.
const sinkName = "http sink"

// Sink POSTs each message to one HTTP endpoint. Create it with [New]; it is
// safe for concurrent use.
type Sink struct {
	cfg       Config
	client    *http.Client
	ownClient bool              // Close closes the idle connections of its own client only
	target    string            // the URL requests go to
	display   string            // the endpoint as errors show it: no userinfo, no query
	static    map[string]string // Config.Headers by canonical name
	signer    *signer
	pre       sinkkit.Precheck // whether a message may still be sent
	// secrets are scrubbed from response excerpts quoted in errors.
	secrets       []string
	longestSecret int
	// sem holds a token per request in flight, across Publish calls.
	sem chan struct{}
	// health is the endpoint's reachability, learnt from the requests.
	health *sinkkit.Reachability

	mu       sync.Mutex
	closed   bool
	closing  chan struct{} // closed by Close: no request starts after it
	inflight sync.WaitGroup
	cancels  map[uint64]context.CancelCauseFunc // requests in flight
	nextID   uint64
}

// New validates cfg and returns a sink. Errors match
// [outbox.ErrInvalidConfig] and never quote a secret.
func New(cfg Config) (*Sink, error) {
	cfg = cfg.withDefaults()
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	key, _ := signingKey(cfg.SigningSecret) // validate checked it
	u.Fragment, u.RawFragment = "", ""
	s := &Sink{
		cfg:     cfg,
		client:  cfg.Client,
		target:  u.String(),
		display: u.Scheme + "://" + u.Host + u.EscapedPath(),
		static:  make(map[string]string, len(cfg.Headers)),
		sem:     make(chan struct{}, cfg.Concurrency),
		closing: make(chan struct{}),
		cancels: make(map[uint64]context.CancelCauseFunc),
		health:  sinkkit.NewReachability(),
	}
	s.pre = sinkkit.Precheck{Sink: sinkName, IsClosed: s.isClosed}
	if s.client == nil {
		s.client, s.ownClient = newClient(cfg), true
	}
	if key != nil {
		s.signer = &signer{key: key}
	}
	for k, v := range cfg.Headers {
		s.static[http.CanonicalHeaderKey(k)] = v
		s.addSecret(v)
	}
	s.addSecret(cfg.SigningSecret)
	if p, ok := u.User.Password(); ok {
		s.addSecret(p)
		// The client sends it as basic authentication, which a receiver may echo.
		s.addSecret(base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + p)))
	}
	return s, nil
}

func (s *Sink) addSecret(v string) {
	if v != "" {
		s.secrets = append(s.secrets, v)
		s.longestSecret = max(s.longestSecret, len(v))
	}
}

// newClient returns the sink's own client: no redirects, the SSRF guard in
// its dialer when DenyPrivate is set, idle connections for Concurrency.
func newClient(cfg Config) *http.Client {
	dialer := &net.Dialer{KeepAlive: 30 * time.Second}
	proxy := http.ProxyFromEnvironment
	if cfg.DenyPrivate {
		dialer.Control = dialControl(cfg.AllowPrivate)
		proxy = nil // a proxy would hide the destination from the guard
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 proxy,
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          max(100, cfg.Concurrency),
			MaxIdleConnsPerHost:   cfg.Concurrency,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Publish POSTs every message and returns one result per message, in
// order: nil when the endpoint answered 2xx. Messages with the same
// ordering key are sent one after another in the given order, each after
// the previous one's response; once one fails, the later ones of its key
// are not sent and report [outbox.ErrNotAttempted]. Different keys are
// sent concurrently, at most Config.Concurrency requests at a time across
// all Publish calls.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if s.isClosed() {
		return sinkkit.Fill(len(msgs), outbox.ErrClosed)
	}
	return s.pre.SendByKey(ctx, msgs, s.cfg.Concurrency, func(i int) error { return s.send(ctx, &msgs[i]) })
}

// Close stops new requests, waits for the ones in flight until ctx is done
// (then cancels them and returns an error wrapping ctx.Err()), and closes
// the idle connections of the sink's own client. Messages of a Publish
// call that had not started fail with [outbox.ErrClosed] and
// [outbox.ErrNotAttempted]; every Publish after Close fails with
// [outbox.ErrClosed]. Close may be called more than once.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() {
		s.inflight.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.mu.Lock()
		n := len(s.cancels)
		for _, cancel := range s.cancels {
			cancel(errCloseAborted)
		}
		s.mu.Unlock()
		err = fmt.Errorf("http sink: close: cancelled %d requests still in flight: %w", n, ctx.Err())
	}
	if s.ownClient {
		s.client.CloseIdleConnections()
	}
	return err
}

func (s *Sink) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// errCloseAborted is the cause of a request that Close cancelled because
// its context ended first.
var errCloseAborted = fmt.Errorf("%w: Close cancelled the request", outbox.ErrClosed)

// begin registers a request in flight with its context, bounded by
// deadline. It returns ok == false once Close has started.
func (s *Sink) begin(ctx context.Context, deadline time.Time) (rctx context.Context, end func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, false
	}
	dctx, cancelDeadline := context.WithDeadline(ctx, deadline)
	rctx, cancel := context.WithCancelCause(dctx)
	id := s.nextID
	s.nextID++
	s.cancels[id] = cancel
	s.inflight.Add(1)
	return rctx, func() {
		s.mu.Lock()
		delete(s.cancels, id)
		s.mu.Unlock()
		cancel(nil)
		cancelDeadline()
		s.inflight.Done()
	}, true
}

// Destination implements [sink.Destinations]: the endpoint, without
// credentials and query (the same for every message).
func (s *Sink) Destination(*outbox.Message) string { return s.display }

// Reachable implements [sink.Health], from the requests sent so far: ok
// once the endpoint answered (any status) until a request gets no
// answer (connection refused, DNS, TLS, timeout). Before the first
// request it reports false with no error: the sink does not probe.
func (s *Sink) Reachable() (ok bool, lastErr error, since time.Time) { return s.health.Reachable() }

// String describes the sink for logs: the endpoint without credentials
// and query.
func (s *Sink) String() string { return "http sink " + s.display }
