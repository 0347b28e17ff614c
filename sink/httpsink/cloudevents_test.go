package httpsink_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/sink/sinkkit"
	"github.com/txoutbox/outbox/sink/sinktest/cetest"
)

// The official CloudEvents SDK decodes what the sink sends in both
// CloudEvents modes, with every attribute of the mapping; the payload is
// the data, and the outbox headers are still there.
func TestCloudEventsDecodeWithSDK(t *testing.T) {
	t.Parallel()
	for _, f := range []sinkkit.Format{sinkkit.FormatCloudEvents, sinkkit.FormatCloudEventsStructured} {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var got []*http.Request
			var bodies [][]byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				got, bodies = append(got, r), append(bodies, body)
				mu.Unlock()
				w.WriteHeader(http.StatusAccepted)
			}))
			t.Cleanup(srv.Close)
			cfg, err := httpsink.ParseURL(srv.URL + "/events?format=" + string(f) + "&source=/outbox/payment_outbox")
			if err != nil {
				t.Fatal(err)
			}
			s, err := httpsink.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close(t.Context()) })
			m := cetest.Message("tx-1001")
			m.Headers["Ce-Id"] = "forged" // an event header cannot replace an attribute
			plain := cetest.Message("tx 2 ü")
			delete(plain.Headers, sink.HeaderAggregateSeq)
			delete(plain.Headers, sink.HeaderTraceparent)
			for i, err := range s.Publish(t.Context(), []outbox.Message{m, plain}) {
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
			}
			for i, want := range []outbox.Message{m, plain} {
				if got[i].Header.Get("Idempotency-Key") != want.EventID.String() {
					// The two aggregates travel concurrently.
					got[0], got[1], bodies[0], bodies[1] = got[1], got[0], bodies[1], bodies[0]
				}
				e, err := cetest.DecodeHTTP(got[i].Header, bodies[i])
				if err != nil {
					t.Fatalf("the SDK cannot decode request %d: %v", i, err)
				}
				if f == sinkkit.FormatCloudEvents && !strings.Contains(want.AggregateID, " ") || f == sinkkit.FormatCloudEventsStructured {
					if err := cetest.Check(e, &want, "/outbox/payment_outbox"); err != nil {
						t.Errorf("request %d: %v", i, err)
					}
				} else if e.Subject() != "tx%202%20%C3%BC" {
					// Binary mode percent-encodes header values; this SDK
					// version does not decode them.
					t.Errorf("subject %q, want the percent-encoded aggregate id", e.Subject())
				}
				if got[i].Header.Get("Idempotency-Key") != want.EventID.String() || got[i].Header.Get("Traceparent") != want.Headers[sink.HeaderTraceparent] {
					t.Errorf("request %d lost the outbox headers: %v", i, got[i].Header)
				}
			}
			ct := got[0].Header.Get("Content-Type")
			if f == sinkkit.FormatCloudEventsStructured && ct != "application/cloudevents+json" || f == sinkkit.FormatCloudEvents && ct != "application/json" {
				t.Errorf("Content-Type %q in mode %s", ct, f)
			}
		})
	}
	if _, err := httpsink.ParseURL("https://x.example/?format=debezium"); err == nil || !strings.Contains(err.Error(), "cloudevents-structured") {
		t.Errorf("format=debezium on HTTP: %v, want an error listing the formats", err)
	}
}
