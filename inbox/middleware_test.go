package inbox_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/inbox"
)

// chargeServer is a payment consumer behind the middleware: each call
// writes one effect in the request's transaction and answers with a body
// that says how many times the handler ran.
type chargeServer struct {
	*httptest.Server
	ran atomic.Int64
	// status, when set, is the status the handler answers with.
	status atomic.Int64
	// hold, when set, makes the handler wait (after its effect) until it
	// is closed; entered is closed when a handler reaches it.
	hold, entered chan struct{}
	// body, when set, replaces the JSON answer.
	body string
}

func newChargeServer(t *testing.T, ib *inbox.Inbox, e *effects, cfg inbox.MiddlewareConfig) *chargeServer {
	t.Helper()
	s := &chargeServer{}
	if cfg.Consumer == "" {
		cfg.Consumer = "payments-api"
	}
	mw, err := ib.Middleware(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Server = httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.ran.Add(1)
		tx := inbox.SQLTx(r.Context())
		if tx == nil {
			http.Error(w, "no transaction in the context", http.StatusInternalServerError)
			return
		}
		m, _ := inbox.FromRequest(r)
		if err := e.insert(r.Context(), tx, m.EventID, 1500); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if s.hold != nil {
			close(s.entered)
			<-s.hold
		}
		if s.body != "" {
			_, _ = io.WriteString(w, s.body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Charge-Run", fmt.Sprint(n))
		status := http.StatusCreated
		if st := s.status.Load(); st != 0 {
			status = int(st)
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"charged":1500,"run":%d}`, n)
	})))
	t.Cleanup(s.Close)
	return s
}

type answer struct {
	status      int
	contentType string
	replayed    string
	body        string
}

func post(t testing.TB, url string, header map[string]string) answer {
	t.Helper()
	a, err := tryPost(url, header)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tryPost is post for other goroutines than the test's.
func tryPost(url string, header map[string]string) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":1500}`))
	if err != nil {
		return answer{}, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get(inbox.HTTPHeaderReplayed), string(b)}, nil
}

// A repeated Idempotency-Key gets the first response again, and the
// handler does not run again.
func TestMiddlewareReplays(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib := newInbox(t, b, inbox.Config{})
		e := newEffects(t, b)
		s := newChargeServer(t, ib, e, inbox.MiddlewareConfig{})

		first := post(t, s.URL, map[string]string{"Idempotency-Key": "evt-1"})
		want := answer{http.StatusCreated, "application/json", "", `{"charged":1500,"run":1}`}
		if first != want {
			t.Fatalf("first answer %+v, want %+v", first, want)
		}
		want.replayed = "true"
		for _, h := range []map[string]string{
			{"Idempotency-Key": "evt-1"},
			{"Outbox-Event-Id": "evt-1"},
			{"Idempotency-Key": "evt-1", "Outbox-Event-Id": "evt-1"},
		} {
			if got := post(t, s.URL, h); got != want {
				t.Fatalf("repeat with %v: %+v, want %+v", h, got, want)
			}
		}
		if s.ran.Load() != 1 || e.count(t, "evt-1") != 1 {
			t.Fatalf("handler ran %d times, %d effects; want 1 and 1", s.ran.Load(), e.count(t, "evt-1"))
		}
		// A body without a Content-Type is replayed with the sniffed one.
		s.body = "ok"
		post(t, s.URL, map[string]string{"Idempotency-Key": "evt-2"})
		if got := post(t, s.URL, map[string]string{"Idempotency-Key": "evt-2"}); got.body != "ok" || got.contentType != "text/plain; charset=utf-8" || got.status != 200 {
			t.Fatalf("replay of an untyped body: %+v", got)
		}
		if st := ib.Stats(); st.Processed != 2 || st.Duplicates != 4 {
			t.Fatalf("stats %+v, want 2 processed, 4 duplicates", st)
		}
	})
}

// A request without an event id gets 400 and nothing is recorded; ids that
// disagree are refused too.
func TestMiddlewareNoEventID(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib := newInbox(t, b, inbox.Config{})
		e := newEffects(t, b)
		s := newChargeServer(t, ib, e, inbox.MiddlewareConfig{})
		if got := post(t, s.URL, nil); got.status != http.StatusBadRequest || !strings.Contains(got.body, "Idempotency-Key") {
			t.Fatalf("no id: %+v, want 400 naming Idempotency-Key", got)
		}
		if got := post(t, s.URL, map[string]string{"Idempotency-Key": "a", "Outbox-Event-Id": "b"}); got.status != http.StatusBadRequest || !strings.Contains(got.body, "two different event ids") {
			t.Fatalf("two ids: %+v, want 400", got)
		}
		if got := post(t, s.URL, map[string]string{"Idempotency-Key": "a", "Outbox-Aggregate-Seq": "x"}); got.status != http.StatusBadRequest {
			t.Fatalf("bad sequence: %+v, want 400", got)
		}
		if s.ran.Load() != 0 || recorded(t, b, ib) != 0 {
			t.Fatalf("handler ran %d times, %d ids recorded; want 0 and 0", s.ran.Load(), recorded(t, b, ib))
		}
	})
}

// A response the client retries (5xx, 408, 429) rolls the effect and the
// id back: the retry runs the handler again. A response too large to
// store fails the same way.
func TestMiddlewareRetryableResponsesRollBack(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib := newInbox(t, b, inbox.Config{})
		e := newEffects(t, b)
		s := newChargeServer(t, ib, e, inbox.MiddlewareConfig{})
		for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusRequestTimeout} {
			s.status.Store(int64(status))
			if got := post(t, s.URL, map[string]string{"Idempotency-Key": "evt-1"}); got.status != status || got.replayed != "" {
				t.Fatalf("answer %+v, want %d as the handler gave it", got, status)
			}
		}
		if n := e.count(t, "evt-1"); n != 0 || recorded(t, b, ib) != 0 {
			t.Fatalf("%d effects and %d ids after retryable answers, want none", n, recorded(t, b, ib))
		}
		s.status.Store(http.StatusUnprocessableEntity) // final: stored and replayed
		post(t, s.URL, map[string]string{"Idempotency-Key": "evt-1"})
		if got := post(t, s.URL, map[string]string{"Idempotency-Key": "evt-1"}); got.status != http.StatusUnprocessableEntity || got.replayed != "true" {
			t.Fatalf("repeat after a 422: %+v, want the 422 replayed", got)
		}
		if s.ran.Load() != 4 || e.count(t, "evt-1") != 1 {
			t.Fatalf("handler ran %d times (want 4), %d effects (want 1)", s.ran.Load(), e.count(t, "evt-1"))
		}

		small := newChargeServer(t, ib, e, inbox.MiddlewareConfig{Consumer: "small", MaxResponseBytes: 10})
		if got := post(t, small.URL, map[string]string{"Idempotency-Key": "evt-2"}); got.status != http.StatusInternalServerError {
			t.Fatalf("oversized response: %+v, want 500", got)
		}
		if n := e.count(t, "evt-2"); n != 0 {
			t.Fatalf("%d effects after an oversized response, want 0", n)
		}
	})
}

// A handler that panics has its transaction rolled back.
func TestMiddlewarePanicRollsBack(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib := newInbox(t, b, inbox.Config{})
		e := newEffects(t, b)
		mw, err := ib.Middleware(inbox.MiddlewareConfig{Consumer: "panicky"})
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := e.insert(r.Context(), inbox.SQLTx(r.Context()), "evt-1", 1); err != nil {
				t.Error(err)
			}
			if calls.Add(1) == 1 {
				panic("boom")
			}
		}))
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set("Idempotency-Key", "evt-1")
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic did not reach the server")
				}
			}()
			h.ServeHTTP(httptest.NewRecorder(), req)
		}()
		if n := e.count(t, "evt-1"); n != 0 || recorded(t, b, ib) != 0 {
			t.Fatalf("%d effects, %d ids after a panic; want 0", n, recorded(t, b, ib))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || e.count(t, "evt-1") != 1 {
			t.Fatalf("retry after the panic: %d, %d effects", rec.Code, e.count(t, "evt-1"))
		}
	})
}

// A duplicate that arrives while the first request is still running waits
// for it and then replays its response; the handler runs once.
func TestMiddlewareConcurrentDuplicate(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib := newInbox(t, b, inbox.Config{})
		e := newEffects(t, b)
		s := newChargeServer(t, ib, e, inbox.MiddlewareConfig{})
		s.hold, s.entered = make(chan struct{}), make(chan struct{})
		release := sync.OnceFunc(func() { close(s.hold) })
		defer release()

		answers := make(chan answer, 2)
		send := func() {
			a, err := tryPost(s.URL, map[string]string{"Idempotency-Key": "evt-1"})
			if err != nil {
				a.body = err.Error()
			}
			answers <- a
		}
		go send()
		<-s.entered
		go send()
		waitBlocked(t, b, ib.Tables().Inbox)
		select {
		case a := <-answers:
			t.Fatalf("an answer (%+v) before the first request finished", a)
		default:
		}
		release()
		first, second := <-answers, <-answers
		if first.replayed == "true" {
			first, second = second, first
		}
		want := answer{http.StatusCreated, "application/json", "", `{"charged":1500,"run":1}`}
		if first != want {
			t.Fatalf("first answer %+v, want %+v", first, want)
		}
		want.replayed = "true"
		if second != want {
			t.Fatalf("concurrent duplicate got %+v, want %+v", second, want)
		}
		if s.ran.Load() != 1 || e.count(t, "evt-1") != 1 {
			t.Fatalf("handler ran %d times, %d effects; want 1 and 1", s.ran.Load(), e.count(t, "evt-1"))
		}
	})
}

func TestMiddlewareConfig(t *testing.T) {
	t.Parallel()
	b := openBackend(t, "sqlite")
	ib := newInbox(t, b, inbox.Config{})
	if _, err := ib.Middleware(inbox.MiddlewareConfig{}); !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "Consumer") {
		t.Fatalf("no consumer: %v", err)
	}
	if _, err := ib.Middleware(inbox.MiddlewareConfig{Consumer: "x", MaxResponseBytes: -1}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatal("negative MaxResponseBytes accepted")
	}
}

// An id recorded by Handle (no response stored) under the middleware's
// consumer name is a duplicate all the same: an empty 200, replayed.
func TestMiddlewareIDRecordedByHandle(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ib := newInbox(t, b, inbox.Config{})
		e := newEffects(t, b)
		handle(t, ib, e, "payments-api", inbox.Message{EventID: "evt-1"})
		s := newChargeServer(t, ib, e, inbox.MiddlewareConfig{})
		if got := post(t, s.URL, map[string]string{"Idempotency-Key": "evt-1"}); got != (answer{status: http.StatusOK, replayed: "true"}) {
			t.Fatalf("answer %+v, want an empty 200, replayed", got)
		}
		if s.ran.Load() != 0 || e.count(t, "evt-1") != 1 {
			t.Fatalf("handler ran %d times, %d effects; want 0 and 1", s.ran.Load(), e.count(t, "evt-1"))
		}
	})
}
