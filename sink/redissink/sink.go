package redissink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

var _ sink.Sink = (*Sink)(nil)

// precheck says whether a message may still be appended.
var precheck = sinkkit.Precheck{Sink: sinkName}

// FieldPayload is the stream entry field that holds the event's payload.
const FieldPayload = "payload"

// FieldRenamedPayloadHeader carries an event header named "payload", which
// would otherwise be ambiguous with the payload field.
const FieldRenamedPayloadHeader = "outbox-header-payload"

// Sink appends each message to a Redis stream with XADD, pipelining a
// Publish call's commands in one round trip. Create it with [New]; it is
// safe for concurrent use.
type Sink struct {
	cfg    Config
	router *sink.Router
	rdb    *redis.Client

	health    *sinkkit.Reachability
	stopProbe context.CancelFunc
	probeDone chan struct{}

	calls sinkkit.Calls // Publish calls in progress
}

// New validates cfg and returns a sink. It does not wait for the server:
// it pings it in the background until it answers, with a growing pause,
// logging at WARN while it cannot be reached; connections are opened as
// messages are published, so a server that is down shows up as
// retryable publish errors and in [Sink.Reachable]. Errors match
// [outbox.ErrInvalidConfig].
func New(_ context.Context, cfg Config) (*Sink, error) {
	cfg = cfg.withDefaults()
	router, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	opts := &redis.Options{
		Addr:        cfg.Addr,
		Username:    cfg.Username,
		Password:    cfg.Password,
		DB:          cfg.DB,
		ClientName:  cfg.ClientName,
		DialTimeout: cfg.DialTimeout,
		// The relay retries; the client must not resend a pipeline on its
		// own, which could write a batch twice without anyone knowing.
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	}
	if cfg.TLS != nil {
		opts.TLSConfig = cfg.TLS.Clone()
	}
	s := &Sink{cfg: cfg, router: router, rdb: redis.NewClient(opts), health: sinkkit.NewReachability().Logging(cfg.Logger, sinkName, "server", cfg.Addr), probeDone: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopProbe = cancel
	go s.probe(ctx)
	return s, nil
}

// probe pings the server until it answers.
func (s *Sink) probe(ctx context.Context) {
	defer close(s.probeDone)
	wait := 100 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout+time.Second)
		err := s.rdb.Ping(pctx).Err()
		cancel()
		if ctx.Err() != nil {
			return
		}
		var reply redis.Error
		if err == nil || errors.As(err, &reply) && !isAuthReply(err) {
			s.health.Reached() // any answer but a refused login: the server is there
			return
		}
		s.health.Failed(fmt.Errorf("redis sink: %s: %w", s.cfg.Addr, err))
		if !sinkkit.Pause(ctx.Done(), wait) {
			return
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func isAuthReply(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS") || strings.Contains(msg, "invalid password")
}

// Reachable implements [sink.Health]: ok once the server answered, until
// a command fails for want of a connection.
func (s *Sink) Reachable() (ok bool, lastErr error, since time.Time) { return s.health.Reachable() }

// Destination implements [sink.Destinations]: the stream of m.
func (s *Sink) Destination(m *outbox.Message) string { return s.router.Route(m) }

// Client is the go-redis client the sink writes with. Do not close it.
func (s *Sink) Client() *redis.Client { return s.rdb }

// fields returns the XADD field-value pairs of m: the outbox-* fields,
// the payload, then the event's own headers.
func fields(m *outbox.Message) []string {
	hs := sinkkit.BrokerHeaders(m)
	out := make([]string, 0, 2*len(hs)+2)
	for i, h := range hs {
		if i == 5 { // after the outbox-* fields
			out = append(out, FieldPayload, string(m.Payload))
		}
		if h[0] == FieldPayload {
			h[0] = FieldRenamedPayloadHeader
		}
		out = append(out, h[0], h[1])
	}
	if len(hs) <= 5 {
		out = append(out, FieldPayload, string(m.Payload))
	}
	return out
}

// Publish appends every message with one pipeline of XADDs, in order, and
// reports each command's reply. See the package documentation for what a
// result means.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if res := precheck.Enter(ctx, &s.calls, msgs); res != nil {
		return res
	}
	defer s.calls.Exit()
	res := make([]error, len(msgs))
	pctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()

	failed := make(map[string]*outbox.Message) // ordering key -> first message that failed
	streams := make([]string, len(msgs))
	cmds := make([]*redis.StringCmd, len(msgs))
	pipe := s.rdb.Pipeline()
	now := time.Now()
	for i := range msgs {
		m := &msgs[i]
		if first, ok := failed[m.OrderingKey()]; ok {
			res[i] = precheck.Behind(m, first, nil)
			continue
		}
		if res[i] = precheck.Expired(m, now); res[i] != nil {
			failed[m.OrderingKey()] = m
			continue
		}
		streams[i] = s.router.Route(m)
		if reason := checkStream(streams[i]); reason != "" {
			res[i] = s.router.Invalid(sinkName, "stream key", m, streams[i], reason)
			failed[m.OrderingKey()] = m
			continue
		}
		cmds[i] = pipe.XAdd(pctx, &redis.XAddArgs{
			Stream: streams[i],
			MaxLen: s.cfg.MaxLen,
			Approx: true,
			ID:     "*",
			Values: fields(m),
		})
	}
	var execErr error
	if pipe.Len() > 0 {
		_, execErr = pipe.Exec(pctx)
		s.observe(execErr, cmds)
	}
	wants, answered := sink.WantsReceipts(ctx), time.Now().UTC()
	for i := range msgs {
		m := &msgs[i]
		if cmds[i] == nil {
			continue
		}
		err := cmds[i].Err()
		if err == nil && cmds[i].Val() == "" {
			// No reply: go-redis reports a failure to set up the connection
			// (a wrong password, say) only as the pipeline's error. A
			// written entry always has an id.
			err = execErr
			if err == nil {
				err = errors.New("no reply to XADD")
			}
		}
		if wants {
			recordReceipt(ctx, m, streams[i], cmds[i].Val(), err, answered)
		}
		first, stopped := failed[m.OrderingKey()]
		switch {
		case err == nil && stopped:
			// Redis applies every command of a pipeline: this one was
			// written although an earlier one of its aggregate failed.
			res[i] = outbox.Retryable(fmt.Errorf("redis sink: event %s was appended to stream %s as %s, but event %s of the "+
				"same aggregate failed before it: reported as not delivered so that the relay sends it again after that one",
				m.EventID, streams[i], cmds[i].Val(), first.EventID), 0)
		case err != nil:
			res[i] = s.classify(pctx, m, streams[i], err)
			if !stopped {
				failed[m.OrderingKey()] = m
			}
		}
	}
	return res
}

// recordReceipt records Redis's answer to the XADD of m to stream: the
// entry id, or an error reply. No reply (a connection error) is no receipt.
func recordReceipt(ctx context.Context, m *outbox.Message, stream, id string, err error, answered time.Time) {
	r := &sink.RedisReceipt{EntryID: id}
	var reply redis.Error
	switch {
	case err == nil && id != "":
	case err != nil && errors.As(err, &reply):
		r.EntryID, r.Error = "", reply.Error()
	default:
		return
	}
	sink.RecordReceipt(ctx, m, &sink.Receipt{Kind: "redis", Destination: stream, AnsweredAt: answered, Redis: r})
}

// observe updates the reachability from a pipeline's outcome: a reply
// (even an error reply) means the server is there; no reply at all, a
// connection error, means it is not.
func (s *Sink) observe(execErr error, cmds []*redis.StringCmd) {
	var reply redis.Error
	for _, c := range cmds {
		if c == nil {
			continue
		}
		if err := c.Err(); err == nil && c.Val() != "" || errors.As(err, &reply) && !isAuthReply(err) {
			s.health.Reached()
			return
		}
	}
	if execErr != nil && !errors.Is(execErr, redis.ErrClosed) && !errors.Is(execErr, context.Canceled) {
		s.health.Failed(fmt.Errorf("redis sink: %s: %w", s.cfg.Addr, execErr))
	}
}

// retryableReplies are error replies of a server that is starting,
// failing over, out of memory or misconfigured for this client: retrying
// later can succeed. Every other error reply (WRONGTYPE, NOPERM, ERR ...)
// is permanent.
var retryableReplies = []string{
	"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "OOM",
	"NOREPLICAS", "MISCONF", "MOVED", "ASK", "NOAUTH", "WRONGPASS", "ERR max number of clients",
}

// classify turns a command's error into an outbox error.
func (s *Sink) classify(pctx context.Context, m *outbox.Message, stream string, err error) error {
	prefix := fmt.Sprintf("redis sink: event %s to stream %s", m.EventID, stream)
	var reply redis.Error
	switch {
	case errors.Is(err, redis.ErrClosed):
		return precheck.NotSent(m, sinkkit.ReasonClosed, outbox.ErrClosed)
	case errors.As(err, &reply):
		msg := reply.Error()
		for _, p := range retryableReplies {
			if strings.HasPrefix(msg, p) {
				return outbox.Retryable(fmt.Errorf("%s: the server answered: %w", prefix, err), 0)
			}
		}
		hint := ""
		if strings.HasPrefix(msg, "WRONGTYPE") {
			hint = ": the key exists and is not a stream; route this aggregate type to another stream (--route), or remove the key, then requeue the event"
		}
		return outbox.Permanent(fmt.Errorf("%s: the server refused the XADD: %w%s", prefix, err, hint))
	case errors.Is(err, context.DeadlineExceeded) && pctx.Err() != nil:
		return outbox.Retryable(fmt.Errorf("%s: no reply within the timeout (%s) or before the publish deadline; "+
			"the entry may still have been appended: %w", prefix, s.cfg.Timeout, err), 0)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return outbox.Retryable(fmt.Errorf("%s: interrupted: %w", prefix, err), 0)
	}
	return outbox.Retryable(fmt.Errorf("%s: connection error (the entry may have been appended): %w", prefix, err), 0)
}

// Close stops new publishes (they fail with [outbox.ErrClosed]), waits
// for the Publish calls in progress, bounded by ctx, and closes the
// connections. A Publish call writes synchronously, so nothing is left
// buffered.
func (s *Sink) Close(ctx context.Context) error {
	if !s.calls.Close() {
		return nil
	}
	s.stopProbe()
	<-s.probeDone
	var err error
	if werr := s.calls.Wait(ctx); werr != nil {
		err = fmt.Errorf("redis sink: close: publish calls still in progress were cut off: %w", werr)
	}
	if cerr := s.rdb.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("redis sink: close: %w", cerr)
	}
	return err
}
