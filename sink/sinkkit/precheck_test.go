package sinkkit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

func msg(aggID string, n byte) outbox.Message {
	return outbox.Message{AggregateType: "payment", AggregateID: aggID, EventID: outbox.EventID{15: n}}
}

func TestNotSentError(t *testing.T) {
	m := msg("a", 1)
	p := Precheck{Sink: "test sink"}
	err := p.NotSent(&m, ReasonContextEnded, context.Canceled)
	if !errors.Is(err, outbox.ErrNotAttempted) || !errors.Is(err, context.Canceled) {
		t.Errorf("%v: want ErrNotAttempted and context.Canceled", err)
	}
	if want := "test sink: event " + m.EventID.String() + " not sent: the publish context ended: context canceled"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	err = p.NotSent(&m, ReasonClosed, outbox.ErrClosed)
	if !errors.Is(err, outbox.ErrClosed) || strings.Contains(err.Error(), outbox.ErrClosed.Error()) {
		t.Errorf("%v: want ErrClosed, without repeating it in the text", err)
	}
	f := msg("a", 0)
	err = p.Behind(&m, &f, nil)
	if !errors.Is(err, outbox.ErrNotAttempted) || !strings.HasSuffix(err.Error(), "event "+f.EventID.String()+" of the same aggregate failed before it") {
		t.Errorf("Behind = %v", err)
	}
	var ne *NotSentError
	if !errors.As(err, &ne) || ne.Cause != nil || ne.EventID != m.EventID {
		t.Errorf("Behind = %#v", err)
	}
	res := p.All([]outbox.Message{m, f}, ReasonClosed, outbox.ErrClosed)
	if len(res) != 2 || !errors.Is(res[1], outbox.ErrClosed) || !strings.Contains(res[1].Error(), f.EventID.String()) {
		t.Errorf("All = %v", res)
	}
}

func TestPrecheckOrder(t *testing.T) {
	now := time.Now()
	m, failed := msg("a", 1), msg("a", 0)
	m.Deadline = now
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	closed := Precheck{Sink: "s", IsClosed: func() bool { return true }}
	open := Precheck{Sink: "s"}
	for _, tc := range []struct {
		name   string
		p      Precheck
		ctx    context.Context
		failed *outbox.Message
		want   string
		is     error
	}{
		{"context first", closed, cancelled, &failed, ReasonContextEnded, context.Canceled},
		{"then closed", closed, context.Background(), &failed, ReasonClosed, outbox.ErrClosed},
		{"then the key", open, context.Background(), &failed, "of the same aggregate failed before it", outbox.ErrNotAttempted},
		{"then the deadline", open, context.Background(), nil, "has passed", context.DeadlineExceeded},
	} {
		err := tc.p.Check(tc.ctx, &m, tc.failed, now)
		if !errors.Is(err, tc.is) || !errors.Is(err, outbox.ErrNotAttempted) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q matching %v", tc.name, err, tc.want, tc.is)
		}
	}
	if err := open.Check(context.Background(), &m, nil, now.Add(-time.Nanosecond)); err != nil {
		t.Errorf("before the deadline: %v", err)
	}
	m.Deadline = time.Time{}
	if err := open.Check(context.Background(), &m, nil, now); err != nil {
		t.Errorf("no deadline: %v", err)
	}
}

func TestKeyChains(t *testing.T) {
	other := msg("a", 3)
	other.AggregateType = "merchant" // same id, other type: another key
	for _, tc := range []struct {
		msgs []outbox.Message
		want string
	}{
		{nil, "[] []"},
		{[]outbox.Message{msg("a", 0), msg("a", 1), msg("a", 2)}, "[0] [1 2 -1]"},
		{[]outbox.Message{msg("a", 0), msg("b", 1), other, msg("b", 3), msg("a", 4)}, "[0 1 2] [4 3 -1 -1 -1]"},
	} {
		heads, next := KeyChains(tc.msgs)
		if got := fmt.Sprint(heads, next); got != tc.want {
			t.Errorf("KeyChains(%d messages) = %s, want %s", len(tc.msgs), got, tc.want)
		}
	}
}

func TestSendByKey(t *testing.T) {
	msgs := []outbox.Message{msg("a", 0), msg("b", 1), msg("a", 2), msg("b", 3), msg("a", 4), msg("c", 5)}
	boom := errors.New("boom")
	for _, workers := range []int{0, 1, 2} {
		var mu sync.Mutex
		var order []int
		p := Precheck{Sink: "s"}
		res := p.SendByKey(context.Background(), msgs, workers, func(i int) error {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if i == 2 {
				return boom
			}
			return nil
		})
		if res[0] != nil || res[1] != nil || res[3] != nil || res[5] != nil || res[2] != boom {
			t.Errorf("workers %d: results %v", workers, res)
		}
		if !errors.Is(res[4], outbox.ErrNotAttempted) || !strings.Contains(res[4].Error(), msgs[2].EventID.String()) {
			t.Errorf("workers %d: after the failure: %v, want not attempted, naming event 2", workers, res[4])
		}
		sent := map[int]bool{}
		last := map[string]int{}
		for _, i := range order {
			k := msgs[i].OrderingKey()
			if j, ok := last[k]; ok && j > i {
				t.Errorf("workers %d: sent %d after %d of the same key", workers, i, j)
			}
			last[k], sent[i] = i, true
		}
		if len(order) != 5 || sent[4] {
			t.Errorf("workers %d: sent %v, want all but 4", workers, order)
		}
	}
}

func TestSendByKeyConcurrency(t *testing.T) {
	msgs := []outbox.Message{msg("a", 0), msg("b", 1), msg("c", 2), msg("d", 3)}
	for _, workers := range []int{0, 2} {
		want := workers
		if want == 0 {
			want = len(msgs)
		}
		var running, most atomic.Int32
		arrived := make(chan struct{}, len(msgs))
		release := make(chan struct{})
		done := make(chan []error)
		go func() {
			done <- Precheck{Sink: "s"}.SendByKey(context.Background(), msgs, workers, func(int) error {
				n := running.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				arrived <- struct{}{}
				<-release
				running.Add(-1)
				return nil
			})
		}()
		for range want {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatalf("workers %d: fewer than %d sends ran at once", workers, want)
			}
		}
		close(release)
		<-done
		if got := most.Load(); int(got) != want {
			t.Errorf("workers %d: %d sends at once, want %d", workers, got, want)
		}
	}
}

func TestSendByKeyContextEnded(t *testing.T) {
	msgs := []outbox.Message{msg("a", 0), msg("a", 1)}
	ctx, cancel := context.WithCancel(context.Background())
	res := Precheck{Sink: "s"}.SendByKey(ctx, msgs, 0, func(int) error {
		cancel()
		return context.Canceled
	})
	if !errors.Is(res[1], context.Canceled) || !errors.Is(res[1], outbox.ErrNotAttempted) {
		t.Errorf("after the context ended: %v, want context.Canceled and not attempted", res[1])
	}
}

func TestCalls(t *testing.T) {
	var c Calls
	if !c.Enter() {
		t.Fatal("a new Calls refuses a call")
	}
	if !c.Close() || c.Close() {
		t.Error("Close should report the first call only")
	}
	if c.Enter() {
		t.Error("Enter after Close succeeded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with a call in progress = %v, want the context's error", err)
	}
	c.Exit()
	if err := c.Wait(context.Background()); err != nil {
		t.Errorf("Wait after Exit = %v", err)
	}
}

func TestPrecheckEnter(t *testing.T) {
	var c Calls
	p := Precheck{Sink: "s"}
	msgs := []outbox.Message{msg("a", 0), msg("b", 1)}
	if res := p.Enter(context.Background(), &c, msgs); res != nil {
		t.Fatalf("Enter on an open sink = %v", res)
	}
	c.Exit()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := p.Enter(ctx, &c, msgs)
	if len(res) != 2 || !errors.Is(res[1], context.Canceled) || !errors.Is(res[1], outbox.ErrNotAttempted) {
		t.Errorf("Enter with an ended context = %v", res)
	}
	c.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := c.Wait(wctx); err != nil {
		t.Errorf("a refused call is still in progress: %v", err)
	}
	res = p.Enter(context.Background(), &c, msgs)
	if len(res) != 2 || !errors.Is(res[0], outbox.ErrClosed) || !errors.Is(res[0], outbox.ErrNotAttempted) {
		t.Errorf("Enter after Close = %v", res)
	}
}
