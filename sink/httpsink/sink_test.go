package httpsink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

func TestPublishSendsHeadersAndExactPayload(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	s := newSink(t, Config{
		URL:     rec.srv.URL + "/hooks/payments?tenant=7",
		Headers: map[string]string{"Authorization": "Bearer token-1", "x-team": "payments"},
	})
	m := message("tx-1", 1)
	m.Attempt = 3
	m.AggregateSeq = 12
	// Whitespace, escapes and non-ASCII must arrive untouched.
	m.Payload = json.RawMessage("{ \"amount\" : 1000,\n  \"memo\": \"caf\\u00e9 é <&>\", \"list\": [1, 2.50] }")
	m.Headers = map[string]string{
		"traceparent":     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"X-Correlation":   "corr-9",
		"Idempotency-Key": "forged",
		"outbox-event-id": "forged",
		"Content-Type":    "text/plain",
		"Authorization":   "forged",
		"User-Agent":      "forged",
		"Webhook-Id":      "forged",
		// The store's header on a compensating event: passed on as the
		// sink's own Outbox-Compensates.
		outbox.HeaderCompensates: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
	}
	errs := s.Publish(testContext(t), []outbox.Message{m})
	if len(errs) != 1 || errs[0] != nil {
		t.Fatalf("Publish = %v, want [nil]", errs)
	}
	reqs := rec.requests()
	if len(reqs) != 1 {
		t.Fatalf("server saw %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != http.MethodPost || r.Path != "/hooks/payments" || r.Query != "tenant=7" {
		t.Errorf("request = %s %s?%s, want POST /hooks/payments?tenant=7", r.Method, r.Path, r.Query)
	}
	if string(r.Body) != string(m.Payload) {
		t.Errorf("body = %q, want the payload byte for byte: %q", r.Body, m.Payload)
	}
	id := m.EventID.String()
	want := map[string]string{
		"Content-Type":          "application/json",
		"Content-Length":        fmt.Sprint(len(m.Payload)),
		"User-Agent":            "outbox-relay",
		"Idempotency-Key":       id,
		"Outbox-Event-Id":       id,
		"Outbox-Event-Type":     "ApprovalRequested",
		"Outbox-Aggregate-Type": "payment",
		"Outbox-Aggregate-Id":   "tx-1",
		"Outbox-Attempt":        "3",
		"Outbox-Aggregate-Seq":  "12",
		"Outbox-Compensates":    "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
		"Authorization":         "Bearer token-1",
		"X-Team":                "payments",
		"Traceparent":           m.Headers["traceparent"],
		"X-Correlation":         "corr-9",
		"Webhook-Id":            "", // no signing secret: no signature headers
		"Webhook-Signature":     "",
	}
	for k, v := range want {
		if got := r.Header.Values(k); v == "" && len(got) != 0 || v != "" && (len(got) != 1 || got[0] != v) {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
}

func TestPublishUserAgent(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	s := newSink(t, Config{URL: rec.srv.URL, UserAgent: "payments-relay/2"})
	if errs := s.Publish(testContext(t), []outbox.Message{message("a", 0)}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if got := rec.requests()[0].Header.Get("User-Agent"); got != "payments-relay/2" {
		t.Errorf("User-Agent = %q, want payments-relay/2", got)
	}
}

func TestPublishClassifiesStatus(t *testing.T) {
	t.Parallel()
	httpDate := func() string { return time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat) }
	for _, tc := range []struct {
		status     int
		retryAfter func() string
		location   string
		// want: "" delivered, "retry" or "permanent"
		want            string
		minAfter, after time.Duration
	}{
		{status: 200},
		{status: 201},
		{status: 202},
		{status: 204},
		{status: 408, want: "retry"},
		{status: 429, want: "retry", retryAfter: func() string { return "7" }, minAfter: 7 * time.Second, after: 7 * time.Second},
		{status: 429, want: "retry", retryAfter: httpDate, minAfter: 25 * time.Second, after: 30 * time.Second},
		{status: 429, want: "retry", retryAfter: func() string { return "soon" }},
		{status: 503, want: "retry", retryAfter: func() string { return "86400" }, minAfter: time.Hour, after: time.Hour},
		{status: 500, want: "retry"},
		{status: 502, want: "retry"},
		{status: 503, want: "retry"},
		{status: 400, want: "permanent"},
		{status: 401, want: "permanent"},
		{status: 404, want: "permanent"},
		{status: 409, want: "permanent"},
		{status: 422, want: "permanent"},
		{status: 301, want: "permanent", location: "https://elsewhere.example/hook"},
		{status: 302, want: "permanent", location: "/moved"},
		{status: 307, want: "permanent", location: "/moved"},
	} {
		name := fmt.Sprintf("%d", tc.status)
		if tc.retryAfter != nil {
			name += "-retry-after"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				if tc.retryAfter != nil {
					w.Header().Set("Retry-After", tc.retryAfter())
				}
				if tc.location != "" {
					w.Header().Set("Location", tc.location)
				}
				w.WriteHeader(tc.status)
				fmt.Fprintf(w, "body of %d", tc.status)
			})
			s := newSink(t, Config{URL: rec.srv.URL})
			err := s.Publish(testContext(t), []outbox.Message{message("a", 0)})[0]
			if n := len(rec.requests()); n != 1 {
				t.Errorf("server saw %d requests, want 1 (redirects must not be followed)", n)
			}
			switch tc.want {
			case "":
				if err != nil {
					t.Fatalf("status %d: err = %v, want nil (delivered)", tc.status, err)
				}
				return
			case "retry":
				var pe *outbox.PublishError
				if !errors.As(err, &pe) || !pe.Retryable {
					t.Fatalf("status %d: err = %v, want a retryable *outbox.PublishError", tc.status, err)
				}
			case "permanent":
				if !outbox.IsPermanent(err) {
					t.Fatalf("status %d: err = %v, want permanent", tc.status, err)
				}
			}
			if got := outbox.RetryAfter(err); got < tc.minAfter || got > tc.after {
				t.Errorf("status %d: RetryAfter = %s, want within [%s, %s]", tc.status, got, tc.minAfter, tc.after)
			}
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode != tc.status {
				t.Errorf("status %d: errors.As(*StatusError) = %v, want code %d", tc.status, se, tc.status)
			}
			for _, part := range []string{fmt.Sprint(tc.status), fmt.Sprintf("body of %d", tc.status), rec.srv.URL} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not say %q", err, part)
				}
			}
			if tc.location != "" && !strings.Contains(err.Error(), tc.location) {
				t.Errorf("error %q does not quote the Location %q", err, tc.location)
			}
			if errors.Is(err, outbox.ErrNotAttempted) {
				t.Errorf("error %q matches ErrNotAttempted, but the request was sent", err)
			}
		})
	}
}

func TestPublishQuotesShortBodyExcerpt(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 10_000) + "TAIL"
	rec := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, "\x1b[31mbad\nrequest\x00 "+long)
	})
	s := newSink(t, Config{URL: rec.srv.URL})
	err := s.Publish(testContext(t), []outbox.Message{message("a", 0)})[0]
	if err == nil {
		t.Fatal("400 was reported as delivered")
	}
	msg := err.Error()
	if strings.Contains(msg, "TAIL") || strings.ContainsAny(msg, "\x1b\x00\n") {
		t.Errorf("error quotes too much or control characters: %q", msg)
	}
	_, excerpt, _ := strings.Cut(msg, "Bad Request: ")
	excerpt, _, _ = strings.Cut(excerpt, "; the receiver")
	if len(excerpt) > excerptLimit || !strings.HasPrefix(excerpt, "[31mbad request") {
		t.Errorf("excerpt = %q (%d bytes), want the start of the body in at most %d bytes", excerpt, len(excerpt), excerptLimit)
	}
}

// TestPublishReusesConnections checks that bodies are drained and closed:
// sequential requests share one connection.
func TestPublishReusesConnections(t *testing.T) {
	t.Parallel()
	conns := make(chan struct{}, 100)
	rec := newRecorderWith(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if strings.Contains(string(body), `"n":1`) {
			w.WriteHeader(http.StatusInternalServerError)
		}
		fmt.Fprint(w, strings.Repeat("response ", 1000))
	}, func(srv *http.Server) {
		srv.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns <- struct{}{}
			}
		}
	})
	s := newSink(t, Config{URL: rec.srv.URL})
	for i := range 5 {
		s.Publish(testContext(t), []outbox.Message{message("a", i)})
	}
	if n := len(conns); n != 1 {
		t.Errorf("5 sequential requests used %d connections, want 1", n)
	}
}

func TestPublishTimeoutIsRetryable(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server closes
	s := newSink(t, Config{URL: rec.srv.URL, Timeout: 50 * time.Millisecond})
	err := s.Publish(testContext(t), []outbox.Message{message("a", 0)})[0]
	var pe *outbox.PublishError
	if !errors.As(err, &pe) || !pe.Retryable {
		t.Fatalf("err = %v, want retryable", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no response within 50ms") {
		t.Errorf("err = %v, want a timeout that names the Timeout", err)
	}
}

func TestPublishEventDeadlineBoundsTheRequest(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	s := newSink(t, Config{URL: rec.srv.URL, Timeout: time.Hour})
	m := message("a", 0)
	m.Deadline = time.Now().Add(100 * time.Millisecond)
	err := s.Publish(testContext(t), []outbox.Message{m})[0]
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("err = %v, want a deadline error", err)
	}
	if time.Now().Before(m.Deadline) {
		t.Errorf("Publish returned before the event's deadline")
	}
}

func TestPublishConnectionRefusedIsRetryable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	s := newSink(t, Config{URL: "http://" + addr + "/hook"})
	err = s.Publish(testContext(t), []outbox.Message{message("a", 0)})[0]
	var pe *outbox.PublishError
	if !errors.As(err, &pe) || !pe.Retryable {
		t.Fatalf("err = %v, want retryable", err)
	}
	if !strings.Contains(err.Error(), "refused") || errors.Is(err, outbox.ErrNotAttempted) {
		t.Errorf("err = %v, want a connection refused that counts as attempted", err)
	}
}

func TestPublishSkipsExpiredEvents(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	s := newSink(t, Config{URL: rec.srv.URL})
	expired := message("a", 0)
	expired.Deadline = time.Now().Add(-time.Second)
	later := message("a", 1) // same aggregate, no deadline
	other := message("b", 2) // another aggregate
	errs := s.Publish(testContext(t), []outbox.Message{expired, later, other})
	if !errors.Is(errs[0], context.DeadlineExceeded) || !strings.Contains(errs[0].Error(), "deadline") {
		t.Errorf("expired event: err = %v, want one wrapping context.DeadlineExceeded", errs[0])
	}
	if !errors.Is(errs[1], outbox.ErrNotAttempted) {
		t.Errorf("later event of the expired one's aggregate: err = %v, want ErrNotAttempted", errs[1])
	}
	if errs[2] != nil {
		t.Errorf("event of another aggregate: err = %v, want nil", errs[2])
	}
	for _, r := range rec.requests() {
		if id := r.Header.Get("Outbox-Event-Id"); id != other.EventID.String() {
			t.Errorf("server received event %s, want only %s", id, other.EventID)
		}
	}
}

func TestPublishCancelledContextSendsNothing(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	s := newSink(t, Config{URL: rec.srv.URL})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	msgs := []outbox.Message{message("a", 0), message("a", 1), message("b", 2)}
	for i, err := range s.Publish(ctx, msgs) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("message %d: err = %v, want context.Canceled", i, err)
		}
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("server saw %d requests after the context was cancelled, want 0", n)
	}
}

func TestPublishCancelDuringRequest(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		arrived <- struct{}{}
		<-r.Context().Done()
	})
	s := newSink(t, Config{URL: rec.srv.URL})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan []error)
	go func() { done <- s.Publish(ctx, []outbox.Message{message("a", 0), message("a", 1)}) }()
	waitFor(t, arrived, "the first request")
	cancel()
	errs := waitFor(t, done, "Publish to return after cancel")
	if !errors.Is(errs[0], context.Canceled) || errors.Is(errs[0], outbox.ErrNotAttempted) || outbox.IsPermanent(errs[0]) {
		t.Errorf("interrupted request: err = %v, want retryable context.Canceled, attempted", errs[0])
	}
	if !errors.Is(errs[1], context.Canceled) || !errors.Is(errs[1], outbox.ErrNotAttempted) {
		t.Errorf("unsent message: err = %v, want context.Canceled and ErrNotAttempted", errs[1])
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

func TestPublishAfterCloseFailsWithErrClosed(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	s, err := New(Config{URL: rec.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(testContext(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(testContext(t)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	errs := s.Publish(testContext(t), []outbox.Message{message("a", 0), message("b", 1)})
	if len(errs) != 2 {
		t.Fatalf("got %d results for 2 messages", len(errs))
	}
	for i, err := range errs {
		if err != outbox.ErrClosed {
			t.Errorf("message %d: err = %v, want outbox.ErrClosed", i, err)
		}
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("server saw %d requests after Close, want 0", n)
	}
}

func TestCloseWaitsForRequestsInFlight(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		arrived <- struct{}{}
		<-release
	})
	s, err := New(Config{URL: rec.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	published := make(chan []error)
	go func() { published <- s.Publish(t.Context(), []outbox.Message{message("a", 0), message("a", 1)}) }()
	waitFor(t, arrived, "the first request")
	closed := make(chan error)
	go func() { closed <- s.Close(testContext(t)) }()
	waitFor(t, s.closing, "Close to start")
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a request was in flight", err)
	default:
	}
	close(release)
	if err := waitFor(t, closed, "Close"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	errs := waitFor(t, published, "Publish")
	if errs[0] != nil {
		t.Errorf("request in flight at Close: err = %v, want nil (it completed)", errs[0])
	}
	if !errors.Is(errs[1], outbox.ErrClosed) || !errors.Is(errs[1], outbox.ErrNotAttempted) {
		t.Errorf("message not started at Close: err = %v, want ErrClosed and ErrNotAttempted", errs[1])
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

func TestCloseGivesUpWithItsContext(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		arrived <- struct{}{}
		<-r.Context().Done()
	})
	s, err := New(Config{URL: rec.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	published := make(chan []error)
	go func() { published <- s.Publish(t.Context(), []outbox.Message{message("a", 0)}) }()
	waitFor(t, arrived, "the request")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want context.DeadlineExceeded", err)
	}
	errs := waitFor(t, published, "Publish after Close cancelled its request")
	if !errors.Is(errs[0], outbox.ErrClosed) || outbox.IsPermanent(errs[0]) || errors.Is(errs[0], outbox.ErrNotAttempted) {
		t.Errorf("cancelled request: err = %v, want retryable, attempted, matching ErrClosed", errs[0])
	}
}

func TestPublishEmpty(t *testing.T) {
	t.Parallel()
	s := newSink(t, Config{URL: "http://127.0.0.1:1/"})
	if errs := s.Publish(testContext(t), nil); len(errs) != 0 {
		t.Errorf("Publish(nil) = %v, want no results", errs)
	}
}

func TestPublishUsesTheConfiguredClient(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	var used bool
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		used = true
		return http.DefaultTransport.RoundTrip(r)
	})}
	s := newSink(t, Config{URL: rec.srv.URL, Client: client, Concurrency: 1})
	if err := s.Publish(testContext(t), []outbox.Message{message("a", 0)})[0]; err != nil {
		t.Fatal(err)
	}
	if !used {
		t.Error("the request did not go through Config.Client")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestPublishRejectsEventHeaderThatCannotBeSent(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	s := newSink(t, Config{URL: rec.srv.URL})
	bad := message("a", 0)
	bad.Headers = map[string]string{"X-Trace": "line\r\nInjected: yes"}
	errs := s.Publish(testContext(t), []outbox.Message{bad, message("a", 1)})
	if !outbox.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), "X-Trace") {
		t.Errorf("bad header: err = %v, want permanent naming X-Trace", errs[0])
	}
	if !errors.Is(errs[1], outbox.ErrNotAttempted) {
		t.Errorf("next event of the aggregate: err = %v, want ErrNotAttempted", errs[1])
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("server saw %d requests, want 0", n)
	}
}
