package httpsink

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

// orderServer records the arrival order of events per aggregate and the
// most requests it saw in flight at once. Every request waits until two
// have been in flight together (so a sink that never overlaps requests
// fails instead of passing by luck), then adds a small random latency.
type orderServer struct {
	*recorder
	inflight, maxInflight atomic.Int64
	overlapped            chan struct{}
	overlapOnce           sync.Once

	mu      sync.Mutex
	arrived map[string][]int // aggregate id -> payload n, in arrival order
	failN   map[int]int      // payload n -> status to answer instead of 204
}

func newOrderServer(t *testing.T, failN map[int]int) *orderServer {
	o := &orderServer{overlapped: make(chan struct{}), arrived: make(map[string][]int), failN: failN}
	o.recorder = newRecorder(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		n := o.inflight.Add(1)
		defer o.inflight.Add(-1)
		for {
			m := o.maxInflight.Load()
			if n <= m || o.maxInflight.CompareAndSwap(m, n) {
				break
			}
		}
		if n >= 2 {
			o.overlapOnce.Do(func() { close(o.overlapped) })
		}
		select {
		case <-o.overlapped:
		case <-time.After(waitLimit):
			t.Errorf("test server: no second request came while one was in flight")
		}
		var p struct{ N int }
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("test server: bad body %q: %v", body, err)
		}
		o.mu.Lock()
		agg := r.Header.Get("Outbox-Aggregate-Id")
		o.arrived[agg] = append(o.arrived[agg], p.N)
		status := o.failN[p.N]
		o.mu.Unlock()
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond) // latency, not synchronization
		if status != 0 {
			w.WriteHeader(status)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return o
}

// interleaved returns keys x perKey messages, round robin over the keys,
// with payload n = position in the slice.
func interleaved(keys, perKey int) []outbox.Message {
	var msgs []outbox.Message
	for i := range perKey {
		for k := range keys {
			msgs = append(msgs, message(fmt.Sprintf("tx-%02d", k), i*keys+k))
		}
	}
	return msgs
}

func TestPublishKeepsOrderPerKeyUnderConcurrency(t *testing.T) {
	t.Parallel()
	const concurrency = 4
	srv := newOrderServer(t, nil)
	s := newSink(t, Config{URL: srv.srv.URL, Concurrency: concurrency})
	msgs := interleaved(20, 20)
	for i, err := range s.Publish(testContext(t), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	want := make(map[string][]int)
	for i, m := range msgs {
		want[m.AggregateID] = append(want[m.AggregateID], i)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for key, order := range want {
		if fmt.Sprint(srv.arrived[key]) != fmt.Sprint(order) {
			t.Errorf("aggregate %s arrived in order %v, want %v", key, srv.arrived[key], order)
		}
	}
	if m := srv.maxInflight.Load(); m > concurrency || m < 2 {
		t.Errorf("server saw at most %d requests in flight, want 2 to %d", m, concurrency)
	}
}

func TestConcurrencyIsSharedByPublishCalls(t *testing.T) {
	t.Parallel()
	const concurrency = 3
	srv := newOrderServer(t, nil)
	s := newSink(t, Config{URL: srv.srv.URL, Concurrency: concurrency})
	var wg sync.WaitGroup
	for range 4 {
		msgs := interleaved(10, 3)
		wg.Go(func() {
			for i, err := range s.Publish(testContext(t), msgs) {
				if err != nil {
					t.Errorf("message %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	if m := srv.maxInflight.Load(); m > concurrency || m < 2 {
		t.Errorf("4 concurrent Publish calls had at most %d requests in flight, want 2 to %d", m, concurrency)
	}
}

func TestPublishStopsAKeyAtItsFirstFailure(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusInternalServerError, http.StatusBadRequest} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			const keys, perKey = 5, 6
			msgs := interleaved(keys, perKey)
			// The third message of tx-01 fails.
			failAt := 2*keys + 1
			srv := newOrderServer(t, map[int]int{failAt: status})
			s := newSink(t, Config{URL: srv.srv.URL, Concurrency: 3})
			errs := s.Publish(testContext(t), msgs)
			for i, err := range errs {
				m := msgs[i]
				switch {
				case i == failAt:
					if err == nil || errors.Is(err, outbox.ErrNotAttempted) || outbox.IsPermanent(err) != (status < 500) {
						t.Errorf("failing message: err = %v, want the status %d error", err, status)
					}
				case m.AggregateID == "tx-01" && i > failAt:
					if !errors.Is(err, outbox.ErrNotAttempted) {
						t.Errorf("message %d after the failure: err = %v, want ErrNotAttempted", i, err)
					}
				default:
					if err != nil {
						t.Errorf("message %d (%s): err = %v, want nil", i, m.AggregateID, err)
					}
				}
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if got, want := fmt.Sprint(srv.arrived["tx-01"]), fmt.Sprint([]int{1, keys + 1, failAt}); got != want {
				t.Errorf("tx-01 arrivals = %s, want %s: nothing after the failure may be sent", got, want)
			}
			for k := range keys {
				if key := fmt.Sprintf("tx-%02d", k); key != "tx-01" && len(srv.arrived[key]) != perKey {
					t.Errorf("%s: %d of %d messages arrived; another key's failure must not hold it up", key, len(srv.arrived[key]), perKey)
				}
			}
		})
	}
}

func TestChains(t *testing.T) {
	t.Parallel()
	msgs := []outbox.Message{message("a", 0), message("b", 1), message("a", 2), message("c", 3), message("b", 4), message("a", 5)}
	msgs[3].AggregateType = "merchant" // same id, other type: another key
	msgs[3].AggregateID = "a"
	heads, next := chains(msgs)
	if got := fmt.Sprint(heads, next); got != "[0 1 3] [2 4 5 -1 -1 -1]" {
		t.Errorf("chains = %s, want [0 1 3] [2 4 5 -1 -1 -1]", got)
	}
}
