package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/httpsink"
)

func startGateway(t *testing.T, cfg GatewayConfig) *Gateway {
	t.Helper()
	g, err := StartGateway(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// post sends one event as the HTTP sink would and returns the status.
func post(t *testing.T, g *Gateway, relay, key, aggID string, seq int, merchant string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"seq": seq, "merchant_id": merchant})
	req, err := http.NewRequest(http.MethodPost, g.EventsURL(relay), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Outbox-Aggregate-Type", "payment")
	req.Header.Set("Outbox-Aggregate-Id", aggID)
	req.Header.Set("Outbox-Event-Type", "ApprovalRequested")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestGatewayJudges(t *testing.T) {
	t.Parallel()
	g := startGateway(t, GatewayConfig{PoisonMerchant: "M-0666"})
	if got := post(t, g, "r1", "e1", "T1", 0, "M-0001"); got != 200 {
		t.Fatalf("first delivery: %d", got)
	}
	if got := post(t, g, "r1", "e1", "T1", 0, "M-0001"); got != 200 {
		t.Fatalf("repeat: %d, want 200 (idempotent)", got)
	}
	if got := post(t, g, "r1", "", "T1", 1, "M-0001"); got != 400 {
		t.Fatalf("no Idempotency-Key: %d, want 400", got)
	}
	if got := post(t, g, "r1", "p1", "T9", 0, "M-0666"); got != 400 {
		t.Fatalf("poison merchant: %d, want 400", got)
	}
	post(t, g, "r2", "e3", "T1", 2, "M-0001")
	post(t, g, "r2", "e2", "T1", 1, "M-0001") // after seq 2: out of order
	post(t, g, "r2", "e4", "T2", 5, "M-0001") // gaps are fine

	g.SetDown(true)
	if got := post(t, g, "r1", "e5", "T3", 0, "M-0001"); got != 503 {
		t.Fatalf("during an outage: %d, want 503", got)
	}
	post(t, g, "r2", "e6", "T4", 0, "M-0001")
	post(t, g, "r2", "e6", "T4", 0, "M-0001")
	g.SetDown(false)
	if hits := g.OutageHits(); len(hits) != 2 || hits[0] != "e5" || hits[1] != "e6" {
		t.Fatalf("outage hits %v, want [e5 e6]", hits)
	}
	if n, relay := g.MostOutageRequests(); n != 2 || relay != "r2" {
		t.Fatalf("most outage requests %d from %q, want 2 from r2", n, relay)
	}
	if ids := g.PoisonRefused(); len(ids) != 1 || ids[0] != "p1" {
		t.Fatalf("poison refused %v, want [p1]", ids)
	}
	g.SetDown(true) // a new outage counts afresh
	if n, _ := g.MostOutageRequests(); n != 0 {
		t.Fatalf("most outage requests %d at the start of a new outage, want 0", n)
	}
	g.SetDown(false)

	r := g.Report()
	if len(r.Accepted) != 4 || r.Duplicates != 1 || r.DupByEvent["e1"] != 1 {
		t.Fatalf("accepted %d, duplicates %d (%v); want 4 and 1 (e1)", len(r.Accepted), r.Duplicates, r.DupByEvent)
	}
	if len(r.Violations) != 1 || r.Violations[0].EventID != "e2" || r.Violations[0].After != 2 {
		t.Fatalf("violations %v, want e2 after seq 2", r.Violations)
	}
	if r.ByRelay["r1"] != 1 || r.ByRelay["r2"] != 3 {
		t.Fatalf("by relay %v", r.ByRelay)
	}
	if r.ByStatus[400] != 2 || r.ByStatus[503] != 3 || r.Requests != 10 {
		t.Fatalf("statuses %v of %d requests", r.ByStatus, r.Requests)
	}
}

// TestGatewayHold: a held request is accepted but not answered until
// released.
func TestGatewayHold(t *testing.T) {
	t.Parallel()
	g := startGateway(t, GatewayConfig{})
	held := g.HoldNext("relay-2")
	post(t, g, "relay-1", "a", "T1", 0, "M-1") // another relay: not held
	answered := make(chan int, 1)
	go func() {
		body, _ := json.Marshal(map[string]any{"seq": 0})
		req, _ := http.NewRequest(http.MethodPost, g.EventsURL("relay-2"), bytes.NewReader(body))
		req.Header.Set("Idempotency-Key", "b")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- -1
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	var h Held
	select {
	case h = <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay-2 request was not held")
	}
	if h.EventID != "b" || h.Relay != "relay-2" {
		t.Fatalf("held %+v", h)
	}
	// The handler waits for the release: it cannot have answered.
	select {
	case code := <-answered:
		t.Fatalf("a held request was answered (%d) before its release", code)
	default:
	}
	if _, ok := g.Report().Accepted["b"]; !ok {
		t.Fatal("a held request must count as accepted: the gateway approved it, the answer is what is lost")
	}
	g.ReleaseHeld()
	select {
	case code := <-answered:
		if code != 200 {
			t.Fatalf("released request answered %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the released request was not answered")
	}
}

// TestGatewayWithHTTPSink: the real HTTP sink's headers are what the
// gateway judges by: a repeated publish is counted as duplicates, and a
// poison merchant's event is a permanent failure.
func TestGatewayWithHTTPSink(t *testing.T) {
	t.Parallel()
	g := startGateway(t, GatewayConfig{PoisonMerchant: "M-0666"})
	sk, err := httpsink.New(httpsink.Config{URL: g.EventsURL("relay-1")})
	if err != nil {
		t.Fatal(err)
	}
	defer sk.Close(context.Background())
	var msgs []outbox.Message
	for i := range 3 {
		msgs = append(msgs, outbox.Message{
			EventID: outbox.NewEventID(), AggregateType: "payment", AggregateID: "T1", EventType: "ApprovalRequested",
			Payload: json.RawMessage(fmt.Sprintf(`{"seq":%d,"merchant_id":"M-0001"}`, i)), Attempt: 1,
		})
	}
	poison := outbox.Message{EventID: outbox.NewEventID(), AggregateType: "payment", AggregateID: "T2", EventType: "ApprovalRequested",
		Payload: json.RawMessage(`{"seq":0,"merchant_id":"M-0666"}`), Attempt: 1}
	res := sk.Publish(context.Background(), append(msgs, poison))
	for i, err := range res[:3] {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if !outbox.IsPermanent(res[3]) {
		t.Fatalf("poison merchant: %v, want a permanent error", res[3])
	}
	for _, err := range sk.Publish(context.Background(), msgs) {
		if err != nil {
			t.Fatal(err)
		}
	}
	r := g.Report()
	if len(r.Accepted) != 3 || r.Duplicates != 3 || len(r.Violations) != 0 {
		t.Fatalf("accepted %d, duplicates %d, violations %v; want 3, 3, none", len(r.Accepted), r.Duplicates, r.Violations)
	}
	if d := r.Accepted[msgs[2].EventID.String()]; d.Seq != 2 || d.Aggregate() != "payment/T1" || d.Relay != "relay-1" {
		t.Fatalf("delivery %+v", d)
	}
}

func TestGatewayConfigErrors(t *testing.T) {
	t.Parallel()
	for _, cfg := range []GatewayConfig{{FailRate: 1.5}, {FailRate: -0.1}, {Latency: -time.Second}} {
		if g, err := StartGateway(cfg); err == nil {
			g.Close()
			t.Errorf("StartGateway(%+v) accepted a bad config", cfg)
		}
	}
}

// TestGatewayCompensations checks that a compensating event (its payload
// names expired_event_id) is counted by type and kept out of the
// payment's sequence check.
func TestGatewayCompensations(t *testing.T) {
	t.Parallel()
	g := startGateway(t, GatewayConfig{})
	if got := post(t, g, "r1", "a1", "T1", 1, "M-0001"); got != 200 {
		t.Fatalf("approval: %d", got)
	}
	body, _ := json.Marshal(map[string]any{"expired_event_id": "a0", "aggregate_type": "payment", "aggregate_id": "T1"})
	req, err := http.NewRequest(http.MethodPost, g.EventsURL("r1"), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "c1")
	req.Header.Set("Outbox-Aggregate-Type", "payment")
	req.Header.Set("Outbox-Aggregate-Id", "T1")
	req.Header.Set("Outbox-Event-Type", "ApprovalExpired")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("compensation: %d", resp.StatusCode)
	}
	rep := g.Report()
	if d := rep.Accepted["c1"]; d.Compensates != "a0" {
		t.Errorf("compensation compensating %q; want a0", d.Compensates)
	}
	if rep.Compensations["ApprovalExpired"] != 1 || len(rep.Accepted) != 2 {
		t.Errorf("compensations %v, accepted %d: want 1 ApprovalExpired beside the approval", rep.Compensations, len(rep.Accepted))
	}
	if len(rep.Violations) != 0 {
		t.Errorf("a compensation without seq counted as an order violation: %v", rep.Violations)
	}
}

// TestGatewaySetLatency checks that a slowed gateway takes about the set
// latency per request, and that SetLatency(0) restores the configured one.
func TestGatewaySetLatency(t *testing.T) {
	t.Parallel()
	g := startGateway(t, GatewayConfig{})
	g.SetLatency(200 * time.Millisecond)
	start := time.Now()
	if got := post(t, g, "r1", "s1", "T1", 0, "M-0001"); got != 200 {
		t.Fatalf("slow request: %d", got)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("a request to the slowed gateway took %s; want at least 100ms (0.5x of 200ms)", took)
	}
	g.SetLatency(0)
	g.mu.Lock()
	lat := g.latency
	g.mu.Unlock()
	if lat != 0 {
		t.Errorf("after SetLatency(0) the latency is %s; want the configured 0", lat)
	}
}
