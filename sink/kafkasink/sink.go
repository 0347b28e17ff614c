package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

var _ sink.Sink = (*Sink)(nil)

// precheck says whether a message may still be produced.
var precheck = sinkkit.Precheck{Sink: sinkName}

// Sink produces each message as a Kafka record with acks=all and the
// idempotent producer. Create it with [New]; it is safe for concurrent use.
type Sink struct {
	cfg    Config
	router *sink.Router
	cl     *kgo.Client

	health   *sinkkit.Reachability
	stopPing context.CancelFunc // ends the first-contact probe
	pingDone chan struct{}

	calls sinkkit.Calls // Publish calls in progress

	// Set by tests only: beforeProduce runs after message i passed its
	// checks and before it is handed to the producer; resolved runs when
	// the producer reports message i's outcome.
	beforeProduce func(i int)
	resolved      func(i int, err error)
}

// New validates cfg and returns a sink. It does not wait for the brokers:
// it reaches for them in the background, retrying with a growing pause
// and logging at WARN while they cannot be reached, and the client
// connects again on its own whenever it needs to. A broker that is down
// shows up as retryable publish errors and in [Sink.Reachable], never as
// a failure here. Errors match [outbox.ErrInvalidConfig].
func New(_ context.Context, cfg Config) (*Sink, error) {
	cfg = cfg.withDefaults()
	router, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, router: router, pingDone: make(chan struct{}),
		health: sinkkit.NewReachability().Logging(cfg.Logger, sinkName, "brokers", cfg.Brokers)}
	opts := []kgo.Opt{
		kgo.WithHooks(connectHook{s}),
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		// Acks from every in-sync replica, and the
		// idempotent producer (franz-go's default, never disabled here), so
		// the client's own retries neither duplicate nor reorder records.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Let a record that was handed to a broker whose answer never came
		// fail when its context ends (the Publish timeout, the event's
		// deadline) instead of being resent after it. Idempotence stays on:
		// franz-go bumps the producer epoch before producing again, so the
		// partition's order holds; the cost is a possible duplicate of the
		// cancelled record, which at-least-once delivery allows anyway.
		kgo.AllowIdempotentProduceCancellation(),
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxMessageBytes)),
		kgo.ProducerLinger(cfg.Linger),
	}
	if cfg.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg.TLS.Clone()))
	}
	if cfg.AllowAutoTopicCreation {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, invalid("%v", err)
	}
	s.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	s.stopPing = cancel
	go s.probe(ctx)
	return s, nil
}

// connectHook tells the sink of every connection attempt to a broker.
type connectHook struct{ s *Sink }

func (h connectHook) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		h.s.health.Reached()
		return
	}
	if errors.Is(err, context.Canceled) {
		return // the client gave up a dial it no longer needed
	}
	addr := net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
	h.s.health.Failed(fmt.Errorf("kafka sink: broker %s: %w", addr, err))
}

// probe asks the brokers for metadata until one answers, so that the
// sink's reachability is known (and logged) before the first publish.
func (s *Sink) probe(ctx context.Context) {
	defer close(s.pingDone)
	wait := 100 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.cl.Ping(pctx)
		cancel()
		if err == nil {
			s.health.Reached()
			return
		}
		if !sinkkit.Pause(ctx.Done(), wait) {
			return
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// Reachable implements [sink.Health]: ok once a broker answered, until a
// connection attempt fails.
func (s *Sink) Reachable() (ok bool, lastErr error, since time.Time) { return s.health.Reachable() }

// Destination implements [sink.Destinations]: the topic of m.
func (s *Sink) Destination(m *outbox.Message) string { return s.router.Route(m) }

// Client is the franz-go client the sink produces with, for metrics and
// admin requests. Do not produce with it or close it.
func (s *Sink) Client() *kgo.Client { return s.cl }

// call is the shared state of one Publish call: the promises of its
// records resolve on franz-go's goroutines.
type call struct {
	mu       sync.Mutex
	raw      []error // franz-go's result per message
	resolved []bool
	answered []time.Time    // when each promise resolved, when receipts are wanted
	failed   map[string]int // ordering key -> first message of the key that failed
	pending  int
	done     chan struct{}
	over     bool // Publish returned: late promises change nothing
}

func (c *call) resolve(i int, key string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return
	}
	c.raw[i], c.resolved[i] = err, true
	if c.answered != nil {
		c.answered[i] = time.Now().UTC()
	}
	if _, ok := c.failed[key]; err != nil && !ok {
		c.failed[key] = i
	}
	c.pending--
	if c.pending == 0 {
		close(c.done)
	}
}

// Publish produces every message asynchronously (franz-go batches them per
// partition) and waits for each acknowledgement, at most ProduceTimeout.
// See the package documentation for what a result means.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if res := precheck.Enter(ctx, &s.calls, msgs); res != nil {
		return res
	}
	defer s.calls.Exit()
	res := make([]error, len(msgs))
	pctx, cancel := context.WithTimeout(ctx, s.cfg.ProduceTimeout)
	defer cancel()

	c := &call{
		raw:      make([]error, len(msgs)),
		resolved: make([]bool, len(msgs)),
		failed:   make(map[string]int),
		pending:  1, // held by the loop below until every record is handed over
		done:     make(chan struct{}),
	}
	if sink.WantsReceipts(ctx) {
		c.answered = make([]time.Time, len(msgs))
	}
	topics := make([]string, len(msgs))
	recs := make([]kgo.Record, len(msgs))
	produced := make([]bool, len(msgs))
	behind := make([]bool, len(msgs)) // not written because an earlier message of its key failed
	var cancels []context.CancelFunc
	defer func() {
		for _, f := range cancels {
			f()
		}
	}()
	for i := range msgs {
		m := &msgs[i]
		key := m.OrderingKey()
		c.mu.Lock()
		first, blocked := c.failed[key]
		c.mu.Unlock()
		if blocked {
			res[i] = precheck.Behind(m, &msgs[first], nil)
			behind[i] = true
			continue
		}
		if err := s.check(pctx, m, &topics[i], &recs[i]); err != nil {
			res[i] = err
			c.mu.Lock()
			c.failed[key] = i
			c.mu.Unlock()
			continue
		}
		rctx := pctx
		if !m.Deadline.IsZero() {
			var cancelRec context.CancelFunc
			rctx, cancelRec = context.WithDeadline(pctx, m.Deadline)
			cancels = append(cancels, cancelRec)
		}
		c.mu.Lock()
		c.pending++
		c.mu.Unlock()
		produced[i] = true
		if s.beforeProduce != nil {
			s.beforeProduce(i)
		}
		s.cl.Produce(rctx, &recs[i], func(_ *kgo.Record, err error) {
			c.resolve(i, key, err)
			if s.resolved != nil {
				s.resolved(i, err)
			}
		})
	}
	c.mu.Lock()
	c.pending--
	if c.pending == 0 {
		close(c.done)
	}
	c.mu.Unlock()

	select {
	case <-c.done:
	case <-pctx.Done():
	}
	c.mu.Lock()
	c.over = true
	raw, resolved := c.raw, c.resolved // recs[i] of a resolved record holds its partition and offset
	c.mu.Unlock()
	if sink.WantsReceipts(ctx) {
		for i := range msgs {
			if produced[i] && resolved[i] {
				recordReceipt(ctx, &msgs[i], &recs[i], raw[i], c.answered[i])
			}
		}
	}
	for i := range msgs {
		if produced[i] && resolved[i] && raw[i] == nil {
			s.health.Reached() // a broker acknowledged: it is reachable
			break
		}
	}

	// Results in order, per key: the first message of a key that was not
	// written stops its key; what franz-go failed after it was not written
	// either (it fails the partition's buffered records together), and what
	// was written after it is reported as not delivered, so the relay sends
	// it again after the failed one.
	firstFail := make(map[string]int)
	writtenAfter := make(map[string]bool)
	var tooLarge []int
	for i := range msgs {
		m := &msgs[i]
		key := m.OrderingKey()
		first, stopped := firstFail[key]
		switch {
		case !produced[i]:
			if !stopped {
				firstFail[key] = i
			}
		case !resolved[i]:
			res[i] = outbox.Retryable(fmt.Errorf("kafka sink: event %s to topic %s: no acknowledgement within the produce timeout (%s) "+
				"or before the publish context ended; is a broker down? the message may still be written: %w",
				m.EventID, topics[i], s.cfg.ProduceTimeout, context.Cause(pctx)), 0)
			if !stopped {
				firstFail[key] = i
			}
		case raw[i] == nil:
			if stopped {
				writtenAfter[key] = true
				res[i] = outbox.Retryable(fmt.Errorf("kafka sink: event %s was written to topic %s (partition %d, offset %d), but event %s "+
					"of the same aggregate failed before it: reported as not delivered so that the relay sends it again after that one",
					m.EventID, topics[i], recs[i].Partition, recs[i].Offset, msgs[first].EventID), 0)
			}
		case stopped:
			var ke *kerr.Error
			if errors.As(raw[i], &ke) {
				// Refused by the broker with the failed batch ahead of it.
				res[i] = precheck.Behind(m, &msgs[first], raw[i])
				behind[i] = true
			} else {
				res[i] = s.result(pctx, m, topics[i], raw[i])
			}
		default:
			firstFail[key] = i
			if errors.Is(raw[i], kerr.MessageTooLarge) {
				tooLarge = append(tooLarge, i)
				continue
			}
			res[i] = s.result(pctx, m, topics[i], raw[i])
		}
	}
	// A batch refused as too large may hold innocent records: resend the
	// refused key's messages alone, in order, until one fails on its own.
	for _, i := range tooLarge {
		key := msgs[i].OrderingKey()
		if res[i] = s.isolate(pctx, &msgs[i], topics[i], writtenAfter[key]); res[i] != nil {
			continue
		}
		for j := i + 1; j < len(msgs); j++ {
			if msgs[j].OrderingKey() != key {
				continue
			}
			if !behind[j] {
				break
			}
			if topics[j] == "" {
				topics[j] = s.router.Route(&msgs[j])
			}
			if res[j] = s.isolate(pctx, &msgs[j], topics[j], false); res[j] != nil {
				break
			}
		}
	}
	return res
}

// check returns why m must not be produced now, or nil; it sets *topic
// and *rec.
func (s *Sink) check(ctx context.Context, m *outbox.Message, topic *string, rec *kgo.Record) error {
	if err := precheck.Check(ctx, m, nil, time.Now()); err != nil {
		return err
	}
	*topic = s.router.Route(m)
	if err := checkTopic(*topic); err != nil {
		return s.router.Invalid(sinkName, "topic", m, *topic, err.Error())
	}
	if err := s.fillRecord(rec, m, *topic); err != nil {
		return outbox.Permanent(fmt.Errorf("kafka sink: %w", err))
	}
	if n := recordBatchBytes(rec); n > s.cfg.MaxMessageBytes {
		return outbox.Permanent(fmt.Errorf("kafka sink: event %s to topic %s is too large: its record is %d bytes "+
			"(payload %d bytes, plus key, headers and batch overhead), over the %d-byte limit (MaxMessageBytes, max_message_bytes): "+
			"shrink the event, or raise the limit and the topic's max.message.bytes together",
			m.EventID, *topic, n, len(m.Payload), s.cfg.MaxMessageBytes))
	}
	return nil
}

// result classifies the failure of a message that was handed to franz-go.
func (s *Sink) result(pctx context.Context, m *outbox.Message, topic string, err error) error {
	ctxErr := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
	expired := !m.Deadline.IsZero() && !time.Now().Before(m.Deadline)
	if ctxErr && !expired && pctx.Err() == nil {
		// The record's own context did not end: franz-go failed it with
		// its partition's other buffered records when the deadline of
		// the record heading them passed.
		return outbox.Retryable(fmt.Errorf("kafka sink: event %s to topic %s: the producer dropped it with its partition's "+
			"buffered records when another event's deadline passed (had it already left, it may have been written): %w",
			m.EventID, topic, err), 0)
	}
	classified := s.classify(m, topic, err)
	if expired && !outbox.IsPermanent(classified) && !errors.Is(classified, outbox.ErrNotAttempted) {
		// franz-go fails a record whose deadline passed with its
		// context's end, or with the error of its last try (a broker it
		// could not dial). Either way it was not acknowledged before its
		// deadline: say so, so that the relay ends the event EXPIRED now
		// rather than retrying it first.
		last := ""
		if !ctxErr {
			last = fmt.Sprintf(" (the producer's last error: %v)", err)
		}
		return outbox.Retryable(fmt.Errorf("kafka sink: event %s to topic %s: no acknowledgement before its deadline %s%s; "+
			"the producer dropped it (had it already left, it may have been written before the deadline): %w",
			m.EventID, topic, m.Deadline.Format(time.RFC3339Nano), last, context.DeadlineExceeded), 0)
	}
	return classified
}

// isolate resends, alone, a message whose record batch the broker refused
// as too large: alone it is either accepted or too large by itself. The
// batch may have been refused because of another record, so a refusal is
// permanent only for a record that is refused on its own.
func (s *Sink) isolate(pctx context.Context, m *outbox.Message, topic string, laterWritten bool) error {
	batchErr := func(why string) error {
		return outbox.Retryable(fmt.Errorf("kafka sink: event %s to topic %s: the broker refused its record batch as too large "+
			"(the topic's max.message.bytes is below MaxMessageBytes %d: lower max_message_bytes to match); %s: %w",
			m.EventID, topic, s.cfg.MaxMessageBytes, why, kerr.MessageTooLarge), 0)
	}
	if laterWritten {
		return batchErr("a later event of its aggregate was written, so it is not resent out of order")
	}
	var rec kgo.Record
	if err := s.check(pctx, m, &topic, &rec); err != nil {
		if errors.Is(err, outbox.ErrNotAttempted) {
			return batchErr("there was no time left to resend it alone")
		}
		return err
	}
	rctx := pctx
	if !m.Deadline.IsZero() {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadline(pctx, m.Deadline)
		defer cancel()
	}
	err := s.cl.ProduceSync(rctx, &rec).FirstErr()
	recordReceipt(pctx, m, &rec, err, time.Now().UTC())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.MessageTooLarge):
		return s.classify(m, topic, err)
	}
	return s.result(pctx, m, topic, err)
}

// Close stops new publishes (they fail with [outbox.ErrClosed]), waits for
// the records already handed to the producer to be acknowledged or to
// fail, and closes the client. ctx bounds the wait; the client is closed
// either way.
func (s *Sink) Close(ctx context.Context) error {
	if !s.calls.Close() {
		return nil
	}
	s.stopPing()
	<-s.pingDone
	err := s.cl.Flush(ctx)
	if werr := s.calls.Wait(ctx); werr != nil && err == nil {
		err = werr
	}
	s.cl.Close()
	if err != nil {
		return fmt.Errorf("kafka sink: close: records still unacknowledged were failed: %w", err)
	}
	return nil
}

// recordReceipt records the receipt of m, whose record rec the producer
// resolved with err at answered: the broker's acknowledgement (partition
// and offset), or its refusal (a Kafka error code). A record that got no
// answer from a broker (a timeout, a cancelled context) has no receipt.
func recordReceipt(ctx context.Context, m *outbox.Message, rec *kgo.Record, err error, answered time.Time) {
	k := &sink.KafkaReceipt{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
	if err != nil {
		var ke *kerr.Error
		if !errors.As(err, &ke) {
			return
		}
		k.Offset, k.Error = -1, ke.Message
	}
	sink.RecordReceipt(ctx, m, &sink.Receipt{Kind: "kafka", Destination: rec.Topic, AnsweredAt: answered, Kafka: k})
}
