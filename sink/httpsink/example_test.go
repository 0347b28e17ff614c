package httpsink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/httpsink"
)

// Example posts one event to an endpoint and prints what the endpoint
// received and the outcome.
func Example() {
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("%s %s %s %s: %s\n", r.Method, r.URL.Path,
			r.Header.Get("Outbox-Aggregate-Type"), r.Header.Get("Outbox-Event-Type"), body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer endpoint.Close()

	cfg, err := httpsink.ParseURL(endpoint.URL + "/payments/events?timeout=5s&concurrency=4")
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := httpsink.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(context.Background())

	results := s.Publish(context.Background(), []outbox.Message{{
		EventID:       outbox.NewEventID(),
		AggregateType: "payment",
		AggregateID:   "tx-1",
		EventType:     "ApprovalRequested",
		Payload:       json.RawMessage(`{"amount":1000,"currency":"KRW"}`),
		Attempt:       1,
	}})
	fmt.Println("delivered:", results[0] == nil)
	// Output:
	// POST /payments/events payment ApprovalRequested: {"amount":1000,"currency":"KRW"}
	// delivered: true
}

// Example_retryAfter shows how a refusal reaches the relay: a 503 with
// Retry-After is retryable after the delay the endpoint asked for.
func Example_retryAfter() {
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	}))
	defer endpoint.Close()

	s, err := httpsink.New(httpsink.Config{URL: endpoint.URL, Timeout: 5 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(context.Background())

	err = s.Publish(context.Background(), []outbox.Message{{
		EventID: outbox.NewEventID(), AggregateType: "payment", AggregateID: "tx-1",
		EventType: "ApprovalRequested", Payload: json.RawMessage(`{}`), Attempt: 1,
	}})[0]
	fmt.Println("permanent:", outbox.IsPermanent(err))
	fmt.Println("retry after:", outbox.RetryAfter(err))
	// Output:
	// permanent: false
	// retry after: 30s
}
