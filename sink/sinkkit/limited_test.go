package sinkkit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

// The token bucket, on a clock of the test's own.
func TestBucketTake(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := &bucket{limits: Limits{Rate: 10, Burst: 3}.withDefaults(), tokens: 3, last: t0, released: make(chan struct{})}
	for i := range 3 {
		if ok, _ := b.take(t0); !ok {
			t.Fatalf("take %d of the burst refused", i)
		}
	}
	ok, wait := b.take(t0)
	if ok || wait != 100*time.Millisecond {
		t.Fatalf("after the burst: ok=%v wait=%s, want a wait of 100ms (one token at 10/s)", ok, wait)
	}
	if ok, _ := b.take(t0.Add(100 * time.Millisecond)); !ok {
		t.Fatal("a token earned in 100ms was refused")
	}
	// A long quiet spell fills the bucket to the burst, not beyond.
	taken := 0
	for {
		if ok, _ := b.take(t0.Add(time.Hour)); !ok {
			break
		}
		taken++
	}
	if taken != 3 {
		t.Fatalf("after an hour, %d tokens at once, want the burst (3)", taken)
	}
	c := &bucket{limits: Limits{MaxInFlight: 2}, released: make(chan struct{})}
	c.take(t0)
	c.take(t0)
	if ok, wait := c.take(t0); ok || wait != 0 {
		t.Fatalf("third in flight of 2: ok=%v wait=%s, want a wait for a slot", ok, wait)
	}
	c.release()
	if ok, _ := c.take(t0); !ok {
		t.Fatal("a freed slot was not taken")
	}
	if d := (Limits{Rate: 200}).withDefaults().Burst; d != 20 {
		t.Fatalf("default burst of 200/s = %d, want 20", d)
	}
}

// routed is a sink of the test's own with two routes (by aggregate
// type), recording what it is sent.
type routed struct {
	mu   sync.Mutex
	sent []outbox.Message
}

func (r *routed) Destination(m *outbox.Message) string { return m.AggregateType + ".events" }
func (r *routed) Publish(_ context.Context, msgs []outbox.Message) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]error, len(msgs))
	failed := map[string]bool{}
	for i, m := range msgs {
		switch {
		case failed[m.OrderingKey()]:
			out[i] = outbox.ErrNotAttempted
		case m.EventType == "Poison":
			out[i] = outbox.Permanent(errors.New("refused"))
			failed[m.OrderingKey()] = true
		default:
			r.sent = append(r.sent, m)
		}
	}
	return out
}
func (r *routed) Close(context.Context) error { return nil }

func routedMsg(typ, id string, n int) outbox.Message {
	return outbox.Message{ID: int64(n), EventID: outbox.NewEventID(), AggregateType: typ, AggregateID: id, EventType: "E", Payload: []byte("{}")}
}

// Each route has its own bucket: a slow route does not hold up another;
// a message whose deadline would pass while it waits is not sent, nor are
// the later ones of its aggregate; order per aggregate holds; a failure
// stops its aggregate.
func TestLimitedPerRoute(t *testing.T) {
	inner := &routed{}
	l, err := Limit(inner, LimitConfig{Routes: map[string]Limits{"slow.events": {Rate: 20, Burst: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if l.Destination(&outbox.Message{AggregateType: "slow"}) != "slow.events" {
		t.Fatal("Destination is not passed through")
	}
	var msgs []outbox.Message
	for i := range 3 {
		msgs = append(msgs, routedMsg("slow", "s", i))
	}
	for i := range 50 {
		msgs = append(msgs, routedMsg("fast", "f", i))
	}
	late := routedMsg("slow", "late", 0)
	late.Deadline = time.Now().Add(20 * time.Millisecond) // the third token of the slow route comes after it
	after := routedMsg("slow", "late", 1)
	poison := routedMsg("fast", "p", 0)
	poison.EventType = "Poison"
	behind := routedMsg("fast", "p", 1)
	msgs = append(msgs, late, after, poison, behind)
	start := time.Now()
	res := l.Publish(context.Background(), msgs)
	took := time.Since(start)
	for i := range 53 {
		if res[i] != nil {
			t.Fatalf("message %d: %v", i, res[i])
		}
	}
	if !errors.Is(res[53], outbox.ErrNotAttempted) || !errors.Is(res[53], context.DeadlineExceeded) {
		t.Fatalf("a message whose deadline passes while it waits: %v, want not sent, deadline exceeded", res[53])
	}
	if !errors.Is(res[54], outbox.ErrNotAttempted) {
		t.Fatalf("the message after it: %v, want not attempted", res[54])
	}
	if !outbox.IsPermanent(res[55]) || !errors.Is(res[56], outbox.ErrNotAttempted) {
		t.Fatalf("a refused message and its follower: %v, %v", res[55], res[56])
	}
	// Three slow messages at 20/s with a burst of 1 take at least 100ms.
	if took < 100*time.Millisecond {
		t.Fatalf("three messages at 20/s (burst 1) took %s", took)
	}
	next := map[string]int{}
	firstSlow := -1
	for i, m := range inner.sent {
		if m.EventID == late.EventID || m.EventID == after.EventID || m.EventID == behind.EventID {
			t.Fatalf("event %s (aggregate %s) was sent", m.EventID, m.AggregateID)
		}
		if int(m.ID) != next[m.AggregateID] {
			t.Fatalf("aggregate %s: message %d sent when %d was due", m.AggregateID, m.ID, next[m.AggregateID])
		}
		next[m.AggregateID]++
		if m.AggregateType == "slow" && m.ID == 1 && firstSlow < 0 {
			firstSlow = i
		}
	}
	// The fast route did not wait for the slow one: all 50 went in the
	// first round, before the second slow message.
	if firstSlow < 50 {
		t.Fatalf("the second slow message went out at position %d, before the fast route's 50", firstSlow)
	}
}

// Waiting honours the context.
func TestLimitedContext(t *testing.T) {
	l, _ := Limit(&routed{}, LimitConfig{Default: Limits{Rate: 1, Burst: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res := l.Publish(ctx, []outbox.Message{routedMsg("a", "x", 0), routedMsg("a", "x", 1), routedMsg("a", "y", 0)})
	if res[0] != nil || !errors.Is(res[1], outbox.ErrNotAttempted) || !errors.Is(res[2], outbox.ErrNotAttempted) {
		t.Fatalf("results %v: want the first sent, the others not sent once the context ended", res)
	}
}

func TestParseLimits(t *testing.T) {
	rest, l, err := CutLimits("https://u:p@gw.example/approve?x=1&rate=200/s&burst=50&max_in_flight=32&y=2")
	if err != nil || rest != "https://u:p@gw.example/approve?x=1&y=2" || l != (Limits{Rate: 200, Burst: 50, MaxInFlight: 32}) {
		t.Fatalf("CutLimits = %q, %+v, %v", rest, l, err)
	}
	if rest, l, err := CutLimits("nats://h:4222"); err != nil || rest != "nats://h:4222" || !l.IsZero() {
		t.Fatalf("no options: %q %+v %v", rest, l, err)
	}
	for raw, want := range map[string]string{
		"kafka://h?rate=fast":                   "count per time",
		"kafka://h?rate=10/parsec":              "unit or a duration",
		"kafka://h?burst=5":                     "without a rate",
		"kafka://h?max_in_flight=-1":            "positive whole number",
		"kafka://h?rate=1/s&rate=2/s":           "twice",
		"redis://u:s3cret@h?rate=0.5/fortnight": "unit",
		"redis://u:s3cret@h?rate=5%zz/s":        "not valid URL escaping",
	} {
		_, _, err := CutLimits(raw)
		if err == nil || !contains(err.Error(), want) || contains(err.Error(), "s3cret") {
			t.Errorf("CutLimits(%q) = %v, want an error mentioning %q without the password", raw, err, want)
		}
	}
	if r, _ := ParseRate("1000/m"); r < 16.66 || r > 16.67 {
		t.Errorf("1000/m = %v per second", r)
	}
	if r, _ := ParseRate("10/100ms"); r != 100 {
		t.Errorf("10/100ms = %v per second", r)
	}
	route, l, err := ParseRouteLimit("payment.events=rate=100/s,max_in_flight=8", Limits{Rate: 200, Burst: 50, MaxInFlight: 32})
	if err != nil || route != "payment.events" || l != (Limits{Rate: 100, Burst: 50, MaxInFlight: 8}) {
		t.Fatalf("ParseRouteLimit = %q %+v %v", route, l, err)
	}
	if _, l, _ := ParseRouteLimit("audit=rate=0", Limits{Rate: 200, Burst: 50}); l.Rate != 0 || l.Burst != 0 {
		t.Fatalf("rate=0 does not lift the rate: %+v", l)
	}
	for _, bad := range []string{"payment.events", "=rate=1/s", "p=rate", "p=speed=3", "p=burst=0x"} {
		if _, _, err := ParseRouteLimit(bad, Limits{}); err == nil {
			t.Errorf("ParseRouteLimit(%q) accepted", bad)
		}
	}
	if _, err := Limit(&routed{}, LimitConfig{Default: Limits{Burst: 3}}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("burst without rate: %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// gated blocks every Publish until its gate opens.
type gated struct {
	routed
	entered chan struct{}
	gate    chan struct{}
}

func (g *gated) Publish(ctx context.Context, msgs []outbox.Message) []error {
	g.entered <- struct{}{}
	<-g.gate
	return g.routed.Publish(ctx, msgs)
}

// A message that waits for a free slot (max_in_flight) past its deadline
// is not sent; once a slot frees, a waiting message without a deadline
// goes (the wake-up is not lost).
func TestLimitedInFlightWait(t *testing.T) {
	g := &gated{entered: make(chan struct{}, 4), gate: make(chan struct{})}
	l, _ := Limit(g, LimitConfig{Default: Limits{MaxInFlight: 1}})
	first := make(chan []error, 1)
	go func() { first <- l.Publish(context.Background(), []outbox.Message{routedMsg("a", "x", 0)}) }()
	<-g.entered // the only slot is taken
	late := routedMsg("a", "y", 0)
	late.Deadline = time.Now().Add(30 * time.Millisecond)
	res := l.Publish(context.Background(), []outbox.Message{late})
	if !errors.Is(res[0], outbox.ErrNotAttempted) || !errors.Is(res[0], context.DeadlineExceeded) {
		t.Fatalf("a message whose deadline passes while it waits for a slot: %v", res[0])
	}
	second := make(chan []error, 1)
	go func() { second <- l.Publish(context.Background(), []outbox.Message{routedMsg("a", "z", 0)}) }()
	close(g.gate)
	if r := <-first; r[0] != nil {
		t.Fatal(r[0])
	}
	select {
	case r := <-second:
		if r[0] != nil {
			t.Fatal(r[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a message waiting for a slot was not woken when the slot was freed")
	}
	if len(g.sent) != 2 {
		t.Fatalf("%d messages sent, want 2", len(g.sent))
	}
}
