package demo

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

func TestSummaryProblems(t *testing.T) {
	t.Parallel()
	ok := Summary{Committed: 10, Delivered: 8, Failed: 1, Expired: 1, Blocked: 1}
	if p := ok.Problems(); len(p) != 0 {
		t.Fatalf("a clean run reported %v", p)
	}
	for _, c := range []struct {
		s    Summary
		want string
	}{
		{Summary{Lost: 1}, "lost"},
		{Summary{OrderViolations: 2}, "out of order"},
		{Summary{RolledBackDelivered: 1}, "rolled-back transactions delivered"},
		{Summary{RolledBackVisible: 1}, "visible in the outbox"},
		{Summary{UnknownDelivered: 1}, "no transaction wrote"},
	} {
		p := c.s.Problems()
		if len(p) != 1 || !strings.Contains(p[0], c.want) {
			t.Errorf("Problems() of %+v = %v, want one mentioning %q", c.s, p, c.want)
		}
		var buf bytes.Buffer
		if err := c.s.WriteTable(&buf); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "result: BROKEN") {
			t.Errorf("table of a broken run lacks 'result: BROKEN':\n%s", buf.String())
		}
	}
}

// TestSummaryJSONKeys: the keys the issue names, in lower case, on one line.
func TestSummaryJSONKeys(t *testing.T) {
	t.Parallel()
	s := Summary{Committed: 5, RolledBack: 1, Delivered: 3, Duplicates: 1, Retried: 2, Failed: 1, Expired: 1}
	b, err := s.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("\n")) {
		t.Fatalf("JSON is not one line: %s", b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"committed", "rolled_back", "delivered", "duplicates", "retried", "failed", "expired", "lost", "order_violations", "ok"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks key %q: %s", k, b)
		}
	}
	if m["ok"] != true || m["committed"] != 5.0 || m["rolled_back"] != 1.0 {
		t.Errorf("JSON values: %s", b)
	}
	s.Lost = 1
	b, _ = s.JSON()
	if !bytes.Contains(b, []byte(`"ok":false`)) {
		t.Errorf("a run with a lost event must have ok false: %s", b)
	}
}

// TestSummaryTooSlow: the table names the incidents a slow machine could
// not show and a smaller time scale to try; a run without them says
// nothing of the kind.
func TestSummaryTooSlow(t *testing.T) {
	t.Parallel()
	s := Summary{Committed: 5, Delivered: 5, Processed: 5, TimeScale: 22, QRTTLMS: 3000,
		TooSlow: []string{"incident 5: the breaker did not open: X", "incident 2: the gateway refused no request: Y"}}
	var buf bytes.Buffer
	if err := s.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"too slow: this machine could not show every incident with a 3s QR lifetime", "try --time-scale 5:",
		"  - incident 5: the breaker did not open: X\n", "  - incident 2: the gateway refused no request: Y\n", "result: ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	s.TimeScale, s.TooSlow = 2, s.TooSlow[:1]
	buf.Reset()
	_ = s.WriteTable(&buf)
	if !strings.Contains(buf.String(), "try --time-scale 1:") {
		t.Errorf("at --time-scale 2 the advice must be 1 (real time):\n%s", buf.String())
	}
	s.TooSlow = nil
	buf.Reset()
	_ = s.WriteTable(&buf)
	if strings.Contains(buf.String(), "too slow") {
		t.Errorf("a run that showed every incident says it was too slow:\n%s", buf.String())
	}
}

// TestSummaryBlockedCompensations: a compensation that waits behind its
// payment's dead letter is named in the table, and the run is still ok.
func TestSummaryBlockedCompensations(t *testing.T) {
	t.Parallel()
	s := Summary{Committed: 3, Delivered: 2, Failed: 1, Expired: 1, Compensations: 2, CompensationsDelivered: 1, CompensationsBlocked: 1}
	var buf bytes.Buffer
	if err := s.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "1 reached that destination, 1 wait BLOCKED behind their payment's dead letter") || !strings.Contains(out, "result: ok") {
		t.Errorf("the table does not name the blocked compensation, or calls the run broken:\n%s", out)
	}
	b, err := s.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"compensations_blocked":1`)) {
		t.Errorf("JSON lacks compensations_blocked: %s", b)
	}
}

// TestSummaryUnsettled: events still moving when the demo stopped waiting
// are named in the table and the JSON, are not lost, and the run is ok but
// not settled.
func TestSummaryUnsettled(t *testing.T) {
	t.Parallel()
	s := Summary{Committed: 5, Delivered: 3, Processed: 3, Unsettled: 2, Compensations: 2, CompensationsDelivered: 1, CompensationsUnsettled: 1}
	var buf bytes.Buffer
	if err := s.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"  unsettled                  2   still PENDING or PROCESSING when the demo stopped waiting: in the outbox, not lost",
		"1 reached that destination, 1 still moving when the demo stopped waiting",
		"result: ok, not settled: 2 committed events were still moving"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b, err := s.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"unsettled":2`)) || !bytes.Contains(b, []byte(`"lost":0`)) || !bytes.Contains(b, []byte(`"ok":true`)) {
		t.Errorf("JSON of an unsettled run: %s", b)
	}
	s.Unsettled = 0
	buf.Reset()
	_ = s.WriteTable(&buf)
	if strings.Contains(buf.String(), "unsettled") || strings.Contains(buf.String(), "not settled") {
		t.Errorf("a settled run's table mentions unsettled events:\n%s", buf.String())
	}
}

// TestUnaccounted: a committed event the demo stopped waiting for is
// unsettled whether or not the gateway has it; one PROCESSED that the
// gateway never accepted is lost; a final one is neither.
func TestUnaccounted(t *testing.T) {
	t.Parallel()
	for _, st := range outbox.Statuses {
		for _, seen := range []bool{false, true} {
			unsettled, lost := unaccounted(st, seen)
			wantUnsettled := st == outbox.StatusPending || st == outbox.StatusProcessing || st == outbox.StatusBlocked
			wantLost := st == outbox.StatusProcessed && !seen
			if unsettled != wantUnsettled || lost != wantLost {
				t.Errorf("unaccounted(%s, seen %v) = unsettled %v, lost %v; want %v, %v", st, seen, unsettled, lost, wantUnsettled, wantLost)
			}
		}
	}
}

// TestBreakerTransitions: openings count once per outage (a failed
// probe's re-opening is not a new one), closings each time.
func TestBreakerTransitions(t *testing.T) {
	t.Parallel()
	log := []store.RouteLogEntry{ // newest first, as the store returns it
		{From: store.BreakerHalfOpen, To: store.BreakerClosed},
		{From: store.BreakerOpen, To: store.BreakerHalfOpen},
		{From: store.BreakerHalfOpen, To: store.BreakerOpen},
		{From: store.BreakerOpen, To: store.BreakerHalfOpen},
		{From: store.BreakerClosed, To: store.BreakerOpen},
	}
	if opened, closed := breakerTransitions(log); opened != 1 || closed != 1 {
		t.Errorf("breakerTransitions = opened %d, closed %d; want 1 and 1", opened, closed)
	}
	if opened, closed := breakerTransitions(log[2:]); opened != 1 || closed != 0 {
		t.Errorf("before the probe got through: opened %d, closed %d; want 1 and 0", opened, closed)
	}
}

// TestSummaryBreakerClosedLate: a breaker that closed only after incident
// 5 stopped waiting says so in the table and the JSON; one that closed in
// time says nothing of the kind.
func TestSummaryBreakerClosedLate(t *testing.T) {
	t.Parallel()
	m := &MaintenanceSummary{BreakerOpened: 1, BreakerClosed: 1, BreakerClosedLate: true, Events: 20, Expired: 4}
	s := Summary{Committed: 20, Expired: 4, Processed: 16, Delivered: 16, Maintenance: m}
	var buf bytes.Buffer
	if err := s.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	if want := "incident 5: breaker opened 1, closed 1, after the incident (routes audit log)"; !strings.Contains(buf.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, buf.String())
	}
	if b, _ := s.JSON(); !bytes.Contains(b, []byte(`"breaker_closed_late":true`)) {
		t.Errorf("JSON lacks breaker_closed_late: %s", b)
	}
	m.BreakerClosedLate = false
	buf.Reset()
	_ = s.WriteTable(&buf)
	if !strings.Contains(buf.String(), "breaker opened 1, closed 1 (routes audit log)") {
		t.Errorf("a breaker closed in time:\n%s", buf.String())
	}
	if b, _ := s.JSON(); bytes.Contains(b, []byte(`breaker_closed_late`)) {
		t.Errorf("JSON of a breaker closed in time has breaker_closed_late: %s", b)
	}
}

// TestSummaryDestinations: each destination has a row with its table's
// counts and what its receiver got (the gateway by relay, Kafka by
// topic), and incident 7 a row of its own.
func TestSummaryDestinations(t *testing.T) {
	t.Parallel()
	s := Summary{Committed: 10, Routed: 10, Delivered: 10, Processed: 10, DeliveredBy: map[string]int{"relay-1": 5, "relay-2": 1},
		Destinations: []DestinationSummary{
			{Name: "gateway", Table: "t_to_gateway", Events: 7, Processed: 6, Failed: 1, Received: 6},
			{Name: "kafka", Table: "t_to_kafka", Events: 9, Processed: 8, Expired: 1, Received: 8, Repeats: 2,
				ByTopic: map[string]int{"payment.events": 6, "merchant.events": 2}},
		},
		KafkaOutage: &KafkaOutageSummary{DownMS: 1500, GatewayDuring: 30, Events: 40, Delivered: 39, Expired: 1, Received: 39, CaughtUpMS: 2000}}
	var buf bytes.Buffer
	if err := s.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"  -> gateway                 6   t_to_gateway: of 7 events 6 delivered, 1 FAILED, 0 EXPIRED; the gateway accepted 6 by relay-1 5, relay-2 1",
		"  -> kafka                   8   t_to_kafka: of 9 events 8 delivered, 0 FAILED, 1 EXPIRED; the consumer read 8: merchant.events 2, payment.events 6 (2 repeats)",
		"  gateway, Kafka down       30   incident 7: events the gateway accepted while Kafka was down (1.5s), 0 repeated; of 40 events for Kafka meanwhile 39 delivered, 1 EXPIRED, read back 39, caught up 2s after",
		"result: ok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b, err := s.JSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"destinations":[{"name":"gateway"`, `"by_topic":{"merchant.events":2,"payment.events":6}`, `"kafka_outage":{"down_ms":1500,"gateway_during":30,"gateway_repeats":0`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
	s.Destinations[1].OrderViolations, s.OrderViolations = 1, 1
	if p := s.Problems(); len(p) != 1 || !strings.Contains(p[0], "out of order") {
		t.Errorf("an order violation at Kafka: Problems() = %v", p)
	}
}

// TestCombine: an event's outcome over its destinations.
func TestCombine(t *testing.T) {
	t.Parallel()
	P, F, E, B, X := outbox.StatusProcessed, outbox.StatusFailed, outbox.StatusExpired, outbox.StatusPending, outbox.StatusSkipped
	for _, c := range []struct {
		in   []outbox.Status
		want outbox.Status
	}{
		{[]outbox.Status{P, P}, P}, {[]outbox.Status{P, E}, E}, {[]outbox.Status{E, B}, B},
		{[]outbox.Status{B, X}, X}, {[]outbox.Status{X, F, P}, F}, {nil, P},
	} {
		if got := combine(c.in); got != c.want {
			t.Errorf("combine(%v) = %s, want %s", c.in, got, c.want)
		}
	}
}
