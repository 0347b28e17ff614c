package main

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpCollector receives OTLP/HTTP trace exports.
type otlpCollector struct {
	mu       sync.Mutex
	requests []*coltrace.ExportTraceServiceRequest
	auth     []string
}

func (c *otlpCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		body = zr
	}
	b, _ := io.ReadAll(body)
	var req coltrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
		http.Error(w, "bad export", 400)
		return
	}
	c.mu.Lock()
	c.requests = append(c.requests, &req)
	c.auth = append(c.auth, r.Header.Get("Authorization"))
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// TestRelayExportsPublishSpans: with OTEL_EXPORTER_OTLP_ENDPOINT set, the
// relay exports one publish span per delivery, linked to the producer's
// span from the event's traceparent; without it, nothing is exported.
func TestRelayExportsPublishSpans(t *testing.T) {
	t.Parallel()
	const producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	const token = "Bearer otlp-T0ken-secret"
	db := "sqlite://" + filepath.Join(t.TempDir(), "o.db")
	mustCLI(t, "", "migrate", "--db", db)
	var lines strings.Builder
	for i := range 3 {
		fmt.Fprintf(&lines, `{"aggregate_type":"payment","aggregate_id":"tx-%d","event_type":"ApprovalRequested","payload":{},"headers":{"traceparent":"00-%s-00f067aa0ba902b7-01"}}`+"\n", i, producerTrace)
	}
	mustCLI(t, lines.String(), "enqueue", "--db", db)
	var mu sync.Mutex
	var received []string
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received = append(received, r.Header.Get("traceparent"))
		mu.Unlock()
	}))
	defer gw.Close()
	col := &otlpCollector{}
	srv := httptest.NewServer(col)
	defer srv.Close()

	cmd, stderr := startProcess(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + srv.URL, "OTEL_EXPORTER_OTLP_HEADERS=Authorization=" + strings.ReplaceAll(token, " ", "%20")},
		"relay", "--db", db, "--sink", gw.URL, "--drain", "--progress", "0")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("relay: %v\n%s", err, stderr.String())
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	spans := 0
	spanTrace := map[string]string{} // event id -> its publish span's trace id
	for i, req := range col.requests {
		if col.auth[i] != token {
			t.Errorf("export %d carried Authorization %q, want the OTEL_EXPORTER_OTLP_HEADERS value", i, col.auth[i])
		}
		for _, rs := range req.ResourceSpans {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			if service != "outbox-relay" {
				t.Errorf("service.name = %q", service)
			}
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					spans++
					if !strings.HasPrefix(sp.Name, "publish ") {
						t.Errorf("span %q", sp.Name)
					}
					attrs := map[string]string{}
					for _, a := range sp.Attributes {
						attrs[a.Key] = a.GetValue().GetStringValue()
					}
					if attrs["messaging.system"] != "http" || attrs["messaging.operation"] != "publish" || attrs["messaging.message.id"] == "" {
						t.Errorf("span attributes %v", attrs)
					}
					if len(sp.Links) != 1 || hex.EncodeToString(sp.Links[0].TraceId) != producerTrace {
						t.Errorf("span links %v, want the producer's trace %s", sp.Links, producerTrace)
					}
					traceID := hex.EncodeToString(sp.TraceId)
					spanTrace[attrs["messaging.message.id"]] = traceID
					found := false
					mu.Lock()
					for _, tp := range received {
						found = found || strings.Contains(tp, traceID)
					}
					mu.Unlock()
					if !found {
						t.Errorf("no request carried the publish span's trace %s (received %v)", traceID, received)
					}
				}
			}
		}
	}
	if spans != 3 {
		t.Fatalf("%d spans exported, want 3\n%s", spans, stderr.String())
	}
	if strings.Contains(stderr.String(), "otlp-T0ken") {
		t.Errorf("the OTLP token reached the logs")
	}
	// The attempt rows keep the publish span's trace id, and events show
	// prints it (text and JSON).
	for eventID, traceID := range spanTrace {
		if traceID == producerTrace {
			t.Fatalf("the publish span of %s reuses the producer's trace; the test cannot tell them apart", eventID)
		}
		if out := mustCLI(t, "", "events", "show", eventID, "--db", db); !strings.Contains(out, traceID) {
			t.Errorf("events show %s does not print the publish span's trace id %s:\n%s", eventID, traceID, out)
		}
		if out := mustCLI(t, "", "events", "show", eventID, "--db", db, "--json"); !strings.Contains(out, `"trace_id":"`+traceID+`"`) {
			t.Errorf("events show --json %s has no trace_id %s:\n%s", eventID, traceID, out)
		}
	}

	// Without the variables: no export, and the producer's traceparent
	// travels unchanged.
	mustCLI(t, lines.String(), "enqueue", "--db", db)
	before := len(col.requests)
	col.mu.Unlock()
	cmd, stderr = startProcess(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="}, "relay", "--db", db, "--sink", gw.URL, "--drain", "--progress", "0")
	err := cmd.Wait()
	col.mu.Lock()
	if err != nil {
		t.Fatalf("relay: %v\n%s", err, stderr.String())
	}
	if len(col.requests) != before || strings.Contains(stderr.String(), "tracing:") {
		t.Errorf("spans exported without OTEL_EXPORTER_OTLP_*:\n%s", stderr.String())
	}
	mu.Lock()
	last := received[len(received)-1]
	mu.Unlock()
	if !strings.Contains(last, producerTrace) {
		t.Errorf("without tracing the sink got traceparent %q, want the producer's", last)
	}
	// Without a tracer, the attempt row keeps the producer's trace id.
	listed := mustCLI(t, "", "events", "list", "--db", db, "--json")
	newest := strings.SplitN(strings.SplitN(listed, `"event_id":"`, 2)[1], `"`, 2)[0]
	if out := mustCLI(t, "", "events", "show", newest, "--db", db); !strings.Contains(out, producerTrace) {
		t.Errorf("without tracing, events show %s does not print the producer's trace id %s:\n%s", newest, producerTrace, out)
	}
}
