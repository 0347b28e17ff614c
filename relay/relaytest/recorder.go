package relaytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

// Delivery is one message as a Recorder saw it.
type Delivery struct {
	ID      int64
	EventID outbox.EventID
	Key     string
	Attempt int
	// Seq is the message's AggregateSeq and SeqHeader its
	// outbox-aggregate-seq header, as the sink received them.
	Seq       int64
	SeqHeader string
	Sink      string
	// Deadline is the deadline the relay passed with the message.
	Deadline time.Time
}

// Recorder is a sink for tests: it records every delivery and can inject
// failures. It keeps the sink contract: per key, once a message fails, the
// later ones of that call are not attempted.
type Recorder struct {
	Name string
	// Fail, when set, decides a message's fate before it is recorded: a
	// non-nil error means the delivery failed and nothing is recorded.
	Fail func(m outbox.Message) error
	// IgnoreDeadline makes the recorder deliver a message past its
	// Deadline, as a careless sink would, so that a test sees what the
	// relay itself sends.
	IgnoreDeadline bool

	mu         sync.Mutex
	deliveries []Delivery
	calls      int
	closed     bool
	log        *[]Delivery // shared log across recorders, under sharedMu
	sharedMu   *sync.Mutex
}

// NewRecorders returns n recorders that also append to one shared log, so
// that the order across relays can be checked.
func NewRecorders(n int) []*Recorder {
	var mu sync.Mutex
	var shared []Delivery
	out := make([]*Recorder, n)
	for i := range out {
		out[i] = &Recorder{Name: fmt.Sprintf("sink-%d", i), log: &shared, sharedMu: &mu}
	}
	return out
}

// Publish implements sink.Sink.
func (r *Recorder) Publish(ctx context.Context, msgs []outbox.Message) []error {
	out := make([]error, len(msgs))
	r.mu.Lock()
	closed := r.closed
	r.calls++
	r.mu.Unlock()
	failed := map[string]bool{}
	for i, m := range msgs {
		switch {
		case closed:
			out[i] = outbox.ErrClosed
			continue
		case failed[m.OrderingKey()]:
			out[i] = fmt.Errorf("earlier message of the key failed: %w", outbox.ErrNotAttempted)
			continue
		case ctx.Err() != nil:
			out[i] = ctx.Err()
			failed[m.OrderingKey()] = true
			continue
		case !r.IgnoreDeadline && !m.Deadline.IsZero() && !time.Now().Before(m.Deadline):
			out[i] = fmt.Errorf("deadline passed: %w", context.DeadlineExceeded)
			failed[m.OrderingKey()] = true
			continue
		}
		if r.Fail != nil {
			if err := r.Fail(m); err != nil {
				out[i] = err
				failed[m.OrderingKey()] = true
				continue
			}
		}
		d := Delivery{ID: m.ID, EventID: m.EventID, Key: m.OrderingKey(), Attempt: m.Attempt, Sink: r.Name, Deadline: m.Deadline,
			Seq: m.AggregateSeq, SeqHeader: m.Headers[sink.HeaderAggregateSeq]}
		r.mu.Lock()
		r.deliveries = append(r.deliveries, d)
		r.mu.Unlock()
		if r.log != nil {
			r.sharedMu.Lock()
			*r.log = append(*r.log, d)
			r.sharedMu.Unlock()
		}
	}
	return out
}

// Close implements sink.Sink.
func (r *Recorder) Close(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return nil
}

// Deliveries returns what this recorder saw.
func (r *Recorder) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.deliveries...)
}

// Shared returns the log shared by recorders made with NewRecorders.
func (r *Recorder) Shared() []Delivery {
	if r.log == nil {
		return r.Deliveries()
	}
	r.sharedMu.Lock()
	defer r.sharedMu.Unlock()
	return append([]Delivery(nil), (*r.log)...)
}

// CheckOrder dedupes deliveries by event id (keeping the first) and reports
// the first key whose ids do not rise strictly.
func CheckOrder(ds []Delivery) error {
	seen := map[outbox.EventID]bool{}
	last := map[string]int64{}
	for _, d := range ds {
		if seen[d.EventID] {
			continue
		}
		seen[d.EventID] = true
		if prev, ok := last[d.Key]; ok && d.ID <= prev {
			return fmt.Errorf("aggregate %q: event id %d delivered after %d", d.Key, d.ID, prev)
		}
		last[d.Key] = d.ID
	}
	return nil
}

// Gate is a Fail function that blocks every message until Open is called,
// ignoring the context (a relay paused mid-publish), then returns err.
type Gate struct {
	once      sync.Once
	open      chan struct{}
	entered   chan struct{}
	enterOnce sync.Once
	Err       error
}

// NewGate returns a closed gate.
func NewGate(err error) *Gate {
	return &Gate{open: make(chan struct{}), entered: make(chan struct{}), Err: err}
}

// Fail blocks until Open.
func (g *Gate) Fail(outbox.Message) error {
	g.enterOnce.Do(func() { close(g.entered) })
	<-g.open
	return g.Err
}

// Entered is closed once a publish reached the gate.
func (g *Gate) Entered() <-chan struct{} { return g.entered }

// Open releases every blocked publish.
func (g *Gate) Open() { g.once.Do(func() { close(g.open) }) }

var errTransient = errors.New("injected transient failure")

// meeting holds each relay's first Publish until at least want relays have
// entered theirs (or until a deadline, after which the test's own check
// reports that the work was not shared). Without it a fast first relay can
// drain a small backlog before the others start, and the check that every
// relay got work would depend on timing.
type meeting struct {
	want    int32
	entered atomic.Int32
	met     chan struct{}
	once    sync.Once
}

func newMeeting(want int32) *meeting { return &meeting{want: want, met: make(chan struct{})} }

// sink wraps rec so that its first Publish waits at the meeting.
func (m *meeting) sink(rec *Recorder) sink.Sink { return &meetingSink{Recorder: rec, m: m} }

type meetingSink struct {
	*Recorder
	m     *meeting
	first sync.Once
}

func (s *meetingSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	s.first.Do(func() {
		if s.m.entered.Add(1) >= s.m.want {
			s.m.once.Do(func() { close(s.m.met) })
		}
		timer := time.NewTimer(20 * time.Second)
		defer timer.Stop()
		select {
		case <-s.m.met:
		case <-timer.C:
		case <-ctx.Done():
		}
	})
	return s.Recorder.Publish(ctx, msgs)
}
