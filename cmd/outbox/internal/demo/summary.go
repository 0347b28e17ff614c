package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// Summary is the outcome of a demo run, as the gateway and the database
// saw it. Its JSON form (lower-case keys) is the last line of `outbox demo
// --json`.
type Summary struct {
	Backend   string  `json:"backend"`
	Table     string  `json:"table"`
	ElapsedMS int64   `json:"elapsed_ms"`
	TimeScale float64 `json:"time_scale"`
	QRTTLMS   int64   `json:"qr_ttl_ms"`
	Seed      uint64  `json:"seed"`

	// Payments counts "QR confirmed" requests handled by the service.
	Payments int `json:"payments"`
	// Committed counts events whose business transaction committed.
	Committed int `json:"committed"`
	// RolledBack counts events written in a transaction that rolled back.
	RolledBack int `json:"rolled_back"`

	// Delivered counts distinct events a destination received: the
	// gateway accepted them or the Kafka consumer read them.
	Delivered int `json:"delivered"`
	// Routed counts committed events the router copied into their
	// destinations' tables (PROCESSED in the outbox table).
	Routed int `json:"routed"`
	// Destinations are the counts of each destination: from its table,
	// and what its receiver (the gateway, the Kafka consumer) got.
	Destinations []DestinationSummary `json:"destinations"`
	// Duplicates counts repeated deliveries the gateway recognised by
	// Idempotency-Key.
	Duplicates int `json:"duplicates"`
	// Retried counts events sent back to PENDING for a retry at least once;
	// RetriedDelivered those of them that were then delivered;
	// RetryAttempts counts the failed attempts of all events.
	Retried          int `json:"retried"`
	RetriedDelivered int `json:"retried_delivered"`
	RetryAttempts    int `json:"retry_attempts"`
	// Processed counts committed events delivered at every destination
	// of their route; Failed those FAILED somewhere (dead-lettered);
	// Expired those that outlived their deadline in the outbox table
	// (never routed) or at a destination.
	Processed   int `json:"processed"`
	Failed      int `json:"failed"`
	DeadLetters int `json:"dead_letters"`
	Alarms      int `json:"alarms"`
	Expired     int `json:"expired"`
	// ExpiredSeen counts EXPIRED events the gateway had nonetheless
	// accepted before their deadline, whose answer was lost in a crash.
	ExpiredSeen int `json:"expired_seen_by_gateway"`
	// Blocked counts events that wait BLOCKED behind a FAILED (dead-lettered,
	// alarmed) event of their aggregate for an operator's retry or skip: not
	// final, but not dropped either. The demo's own events expire instead,
	// so it is 0 unless a high --fail-rate exhausts the retries of an event
	// without a deadline.
	Blocked int `json:"blocked"`
	// Reaped counts events returned to PENDING after a dead relay's lease.
	Reaped int `json:"reaped"`

	// Unsettled counts committed events still PENDING or PROCESSING (or
	// BLOCKED, but not behind a dead letter) when the demo stopped waiting
	// for them: the relays fell behind on a loaded machine. They are in
	// the outbox, so not lost; the relays would deliver them.
	Unsettled int `json:"unsettled"`
	// Lost counts committed events missing from the outbox that the
	// gateway never accepted, and events PROCESSED that it never
	// accepted. Must be 0.
	Lost int `json:"lost"`
	// OrderViolations counts events the gateway accepted after a later
	// event of their aggregate. Must be 0.
	OrderViolations int `json:"order_violations"`
	// RolledBackDelivered counts events of rolled-back transactions that
	// reached the gateway; RolledBackVisible those found in the outbox.
	// Both must be 0.
	RolledBackDelivered int `json:"rolled_back_delivered"`
	RolledBackVisible   int `json:"rolled_back_visible"`
	// UnknownDelivered counts events the gateway accepted that no
	// transaction wrote. Must be 0.
	UnknownDelivered int `json:"unknown_delivered"`

	// Compensations counts the compensating events (ApprovalExpired) the
	// store enqueued for expired approvals, in the table where each
	// expired; CompensationsDelivered those delivered from there, and
	// CompensationsBlocked those that wait BLOCKED behind a dead letter of
	// their payment (for an operator, as any event there).
	Compensations          int `json:"compensations"`
	CompensationsDelivered int `json:"compensations_delivered"`
	CompensationsBlocked   int `json:"compensations_blocked,omitempty"`
	// CompensationsUnsettled counts those still moving when the demo
	// stopped waiting (see Unsettled).
	CompensationsUnsettled int `json:"compensations_unsettled,omitempty"`

	// Maintenance is incident 5's outcome, EDF incident 6's, KafkaOutage
	// incident 7's.
	Maintenance *MaintenanceSummary `json:"maintenance,omitempty"`
	EDF         *EDFSummary         `json:"edf,omitempty"`
	KafkaOutage *KafkaOutageSummary `json:"kafka_outage,omitempty"`

	// PoisonRefused counts the poison merchant's events the gateway
	// refused (400); PoisonRefusedExpired those of them that ended
	// EXPIRED: their relay lost its lease before it recorded the answer,
	// and the event ran out before it was sent again.
	PoisonRefused        int `json:"poison_refused"`
	PoisonRefusedExpired int `json:"poison_refused_expired"`
	// TooSlow says which incidents could not show because this machine
	// was too slow for the compressed QR lifetime (the events ran out
	// before a relay sent them), and what it measured. The guarantees
	// hold all the same; a smaller --time-scale shows the incidents.
	TooSlow []string `json:"too_slow,omitempty"`

	GatewayRequests int            `json:"gateway_requests"`
	DeliveredBy     map[string]int `json:"delivered_by"` // at the gateway, by relay

	OK bool `json:"ok"`
}

// MaintenanceSummary is the outcome of the gateway's maintenance outage.
type MaintenanceSummary struct {
	// BreakerOpened and BreakerClosed count the breaker's transitions to
	// OPEN (not after a failed probe) and to CLOSED, from the routes audit log.
	BreakerOpened int `json:"breaker_opened"`
	BreakerClosed int `json:"breaker_closed"`
	// BreakerClosedLate says the breaker closed only after the incident
	// stopped waiting for it (a machine too slow for the compressed time):
	// then both counts run from the incident to the end of the run.
	BreakerClosedLate bool `json:"breaker_closed_late,omitempty"`
	// Events were written or refused during the outage; Processed, Failed
	// and Expired count their final statuses; ExpiredUnavailable the
	// EXPIRED ones whose reason is "destination unavailable since ...".
	Events             int `json:"events"`
	Processed          int `json:"processed"`
	Failed             int `json:"failed"`
	Expired            int `json:"expired"`
	ExpiredUnavailable int `json:"expired_unavailable"`
	// Moving counts the events not yet final when the demo stopped
	// waiting for them (they are accounted for at the end of the run).
	Moving int `json:"moving"`
	// MostOutageRequests is the most requests one relay sent during the
	// outage; BreakerThreshold the faults within the breaker's window
	// that open it (its MinAttempts).
	MostOutageRequests int `json:"most_outage_requests_one_relay"`
	BreakerThreshold   int `json:"breaker_min_attempts"`
}

// EDFSummary compares how many short-deadline approvals met their
// deadline behind the same backlog, claimed earliest-deadline-first
// (Approvals, Met, Missed) and strictly FIFO (the FIFO fields).
type EDFSummary struct {
	Backlog       int   `json:"backlog"`
	DeadlineMS    int64 `json:"deadline_ms"`
	Approvals     int   `json:"approvals"`
	Met           int   `json:"met"`
	Missed        int   `json:"missed"`
	FIFOApprovals int   `json:"fifo_approvals"`
	FIFOMet       int   `json:"fifo_met"`
	FIFOMissed    int   `json:"fifo_missed"`
}

// DestinationSummary is one destination's outcome: its table's final
// statuses, and what its receiver got.
type DestinationSummary struct {
	Name  string `json:"name"`
	Table string `json:"table"`
	// Events counts the rows of its table (the routed events and the
	// compensations written there); the statuses count them.
	Events    int `json:"events"`
	Processed int `json:"processed"`
	Failed    int `json:"failed"`
	Expired   int `json:"expired"`
	Blocked   int `json:"blocked"`
	Open      int `json:"open"` // PENDING or PROCESSING when the demo stopped waiting
	// Received counts the distinct events the receiver got; Repeats the
	// repeated ones (gateway: by Idempotency-Key; Kafka: by event id).
	Received int `json:"received"`
	Repeats  int `json:"repeats"`
	// Lost counts events PROCESSED in the table that the receiver never
	// got; OrderViolations events received after a later one of their
	// aggregate. Both must be 0.
	Lost            int `json:"lost"`
	OrderViolations int `json:"order_violations"`
	// ByTopic counts Kafka's distinct events by topic.
	ByTopic map[string]int `json:"by_topic,omitempty"`
}

// KafkaOutageSummary is the outcome of incident 7: Kafka down, the
// gateway up.
type KafkaOutageSummary struct {
	DownMS int64 `json:"down_ms"`
	// GatewayDuring counts the events the gateway accepted while Kafka
	// was down; GatewayRepeats the gateway requests repeated from the
	// stop to the catch-up (must be 0: Kafka's outage holds nothing back
	// at the gateway).
	GatewayDuring  int `json:"gateway_during"`
	GatewayRepeats int `json:"gateway_repeats"`
	// Events were written during the outage and routed to Kafka; their
	// outcomes at Kafka; Received those the consumer read back.
	Events      int   `json:"events"`
	Delivered   int   `json:"delivered"`
	Expired     int   `json:"expired"`
	Moving      int   `json:"moving"`
	Received    int   `json:"received"`
	CaughtUpMS  int64 `json:"caught_up_ms"`
	KafkaDuring int   `json:"kafka_during"`
}

// Problems lists what broke a guarantee; empty means the run passed.
func (s *Summary) Problems() []string {
	var p []string
	if s.Lost > 0 {
		p = append(p, fmt.Sprintf("%d committed events lost", s.Lost))
	}
	if s.OrderViolations > 0 {
		p = append(p, fmt.Sprintf("%d events delivered out of order", s.OrderViolations))
	}
	if s.RolledBackDelivered > 0 {
		p = append(p, fmt.Sprintf("%d events of rolled-back transactions delivered", s.RolledBackDelivered))
	}
	if s.RolledBackVisible > 0 {
		p = append(p, fmt.Sprintf("%d events of rolled-back transactions visible in the outbox", s.RolledBackVisible))
	}
	if s.UnknownDelivered > 0 {
		p = append(p, fmt.Sprintf("%d events delivered that no transaction wrote", s.UnknownDelivered))
	}
	return p
}

// JSON returns the summary as one line of JSON, with OK set.
func (s *Summary) JSON() ([]byte, error) {
	s.OK = len(s.Problems()) == 0
	return json.Marshal(s)
}

// WriteTable prints the summary table.
func (s *Summary) WriteTable(w io.Writer) error {
	var b strings.Builder
	row := func(label string, n int, note string) {
		fmt.Fprintf(&b, "  %-20s %7d   %s\n", label, n, note)
	}
	must0 := func(n int) string {
		if n == 0 {
			return "ok (must be 0)"
		}
		return "BROKEN (must be 0)"
	}
	fmt.Fprintf(&b, "summary: %s, %s, QR lifetime 66s run as %s (--time-scale %g)\n",
		s.Backend, (time.Duration(s.ElapsedMS) * time.Millisecond).Round(100*time.Millisecond),
		(time.Duration(s.QRTTLMS) * time.Millisecond).String(), s.TimeScale)
	row("QR confirmations", s.Payments, "requests to the payment service")
	row("committed", s.Committed, "events whose business transaction committed")
	row("rolled back", s.RolledBack, fmt.Sprintf("events of transactions a business rule rolled back; delivered: %d, in the outbox: %d", s.RolledBackDelivered, s.RolledBackVisible))
	row("routed", s.Routed, "committed events the router copied into their destinations' tables (one outbox table)")
	row("delivered (unique)", s.Delivered, "distinct events a destination received: the gateway accepted or the Kafka consumer read")
	for _, d := range s.Destinations {
		row("-> "+d.Name, d.Received, d.note(s.DeliveredBy))
	}
	row("duplicates", s.Duplicates, "repeats the gateway dropped by Idempotency-Key (only after a crash)")
	row("retried", s.Retried, fmt.Sprintf("retried with backoff after a failed attempt; %d of them then delivered (%d failed attempts in all)", s.RetriedDelivered, s.RetryAttempts))
	row("FAILED", s.Failed, fmt.Sprintf("dead letters: %d, alarms raised: %d", s.DeadLetters, s.Alarms))
	note := "outlived their QR code before they were routed, or at a destination: never sent there after it"
	if s.ExpiredSeen > 0 {
		note = fmt.Sprintf("outlived their QR code before they were routed, or at a destination (%d had reached the gateway before a crash lost the answer)", s.ExpiredSeen)
	}
	row("EXPIRED", s.Expired, note)
	if s.Blocked > 0 {
		row("BLOCKED", s.Blocked, "wait behind a dead letter of their aggregate for an operator (outbox events retry|skip)")
	}
	blockedComp := ""
	if s.CompensationsBlocked > 0 {
		blockedComp = fmt.Sprintf(", %d wait BLOCKED behind their payment's dead letter", s.CompensationsBlocked)
	}
	if s.CompensationsUnsettled > 0 {
		blockedComp += fmt.Sprintf(", %d still moving when the demo stopped waiting", s.CompensationsUnsettled)
	}
	row("compensations", s.Compensations, fmt.Sprintf("ApprovalExpired enqueued for expired approvals (on_expired), in the table where each expired; %d reached that destination%s", s.CompensationsDelivered, blockedComp))
	if m := s.Maintenance; m != nil {
		late := ""
		if m.BreakerClosedLate {
			late = ", after the incident"
		}
		row("maintenance FAILED", m.Failed, fmt.Sprintf("incident 5: breaker opened %d, closed %d%s (routes audit log); of %d events %d delivered, %d EXPIRED (%d \"destination unavailable since ...\")",
			m.BreakerOpened, m.BreakerClosed, late, m.Events, m.Processed, m.Expired, m.ExpiredUnavailable))
	}
	if e := s.EDF; e != nil {
		row("EDF met deadline", e.Met, fmt.Sprintf("incident 6: of %d approvals (%s deadline, behind %d receipts); strict FIFO baseline: %d of %d",
			e.Approvals, time.Duration(e.DeadlineMS)*time.Millisecond, e.Backlog, e.FIFOMet, e.FIFOApprovals))
	}
	if k := s.KafkaOutage; k != nil {
		row("gateway, Kafka down", k.GatewayDuring, fmt.Sprintf("incident 7: events the gateway accepted while Kafka was down (%s), %d repeated; of %d events for Kafka meanwhile %d delivered, %d EXPIRED, read back %d, caught up %s after",
			(time.Duration(k.DownMS)*time.Millisecond).Round(100*time.Millisecond), k.GatewayRepeats, k.Events, k.Delivered, k.Expired, k.Received,
			(time.Duration(k.CaughtUpMS)*time.Millisecond).Round(100*time.Millisecond)))
	}
	row("reaped", s.Reaped, "returned to PENDING after a dead relay's lease")
	if s.Unsettled > 0 {
		row("unsettled", s.Unsettled, "still PENDING or PROCESSING when the demo stopped waiting: in the outbox, not lost (the relays fell behind on this machine)")
	}
	row("lost", s.Lost, must0(s.Lost)+": committed, yet missing from the outbox, or PROCESSED at a destination that never got it")
	row("order violations", s.OrderViolations, must0(s.OrderViolations)+": per aggregate, as the gateway and the Kafka consumer saw them")
	if len(s.TooSlow) > 0 {
		fmt.Fprintf(&b, "too slow: this machine could not show every incident with a %s QR lifetime (the guarantees above are checked all the same); try --time-scale %g:\n",
			time.Duration(s.QRTTLMS)*time.Millisecond, max(1, math.Floor(s.TimeScale/4)))
		for _, why := range s.TooSlow {
			fmt.Fprintf(&b, "  - %s\n", why)
		}
	}
	if p := s.Problems(); len(p) > 0 {
		fmt.Fprintf(&b, "result: BROKEN: %s\n", strings.Join(p, "; "))
	} else if s.Unsettled > 0 {
		fmt.Fprintf(&b, "result: ok, not settled: %d committed events were still moving when the demo stopped waiting (in the outbox, not lost); nothing rolled back was sent; order held\n", s.Unsettled)
	} else {
		b.WriteString("result: ok: every committed event was delivered, dead-lettered or expired; nothing rolled back was sent; order held\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// note is a destination's row in the summary table.
func (d DestinationSummary) note(byRelay map[string]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: of %d events %d delivered, %d FAILED, %d EXPIRED", d.Table, d.Events, d.Processed, d.Failed, d.Expired)
	if d.Blocked > 0 {
		fmt.Fprintf(&b, ", %d BLOCKED", d.Blocked)
	}
	if d.Open > 0 {
		fmt.Fprintf(&b, ", %d still moving", d.Open)
	}
	if len(d.ByTopic) > 0 {
		fmt.Fprintf(&b, "; the consumer read %d%s (%d repeats)", d.Received, byList(": ", d.ByTopic), d.Repeats)
	} else {
		fmt.Fprintf(&b, "; the gateway accepted %d%s", d.Received, byList(" by ", byRelay))
	}
	return b.String()
}

// byList renders "relay-1 10, relay-2 5" after prefix, or "" when empty.
func byList(prefix string, m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return prefix + strings.Join(parts, ", ")
}
