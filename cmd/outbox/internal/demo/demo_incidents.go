package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// maintenanceResult is what incident 5 measured.
type maintenanceResult struct {
	ran            bool
	opened, closed int // breaker transitions in the routes audit log
	// logBefore is the routes audit log's length before the incident
	// (the log is newest first); closedLate that the breaker closed only
	// after the incident stopped waiting for it, counted at the end of
	// the run.
	logBefore          int
	closedLate         bool
	events             int // events written during the maintenance, or refused by it
	processed, failed  int
	expired, expiredBy int // expiredBy: EXPIRED "destination unavailable since ..."
	moving             int
	sample             outbox.EventID // one of the expiredBy, for its audit trail
	// mostFaults is the most 503s one relay met during the outage;
	// threshold the faults within the breaker's window that open it.
	mostFaults, threshold int
}

// edfPhase is one run of incident 6's load.
type edfPhase struct {
	approvals, met, missed, moving int
	took                           time.Duration
}

// edfResult is what incident 6 measured: the same load claimed
// earliest-deadline-first, then strictly FIFO.
type edfResult struct {
	ran         bool
	backlog     int
	deadline    time.Duration
	edf, fifo   edfPhase
	slowLatency time.Duration
}

// routeLog returns the audit log of the gateway table's breakers, newest
// first.
func (d *demoRun) routeLog(ctx context.Context) ([]store.RouteLogEntry, error) {
	return d.gwStore().RouteLog(ctx, "", 10000)
}

// breakerWait bounds how long incident 5 keeps the gateway down past the
// planned maintenance for the breaker to open.
const breakerWait = time.Minute

// downUntilBreakerOpens returns once the routes audit log has an entry
// to open past the first known ones (the log is newest first), or after
// breakerWait. On a machine too slow for the compressed time, the relays
// may not have met enough 503s within the planned maintenance:
// the gateway then stays down until they have.
func (d *demoRun) downUntilBreakerOpens(ctx context.Context, known int) error {
	said := false
	for end := time.Now().Add(breakerWait); time.Now().Before(end); {
		all, err := d.routeLog(ctx)
		if err != nil {
			return fmt.Errorf("read the routes audit log: %w", err)
		}
		for _, e := range all[:max(0, len(all)-known)] {
			if e.To == store.BreakerOpen {
				return nil
			}
		}
		if !said {
			d.con.Printf("", "   the breaker has not opened yet (this machine is slow for the compressed time): the gateway stays down until it does")
			said = true
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// incidentMaintenance is incident 5: the gateway is down for longer than
// the QR lifetime. The breaker opens, the relays stop sending (no retry
// is spent, nothing is FAILED), probes find it back and close it; the
// events whose QR code ran out meanwhile end EXPIRED with the outage in
// their reason.
func (d *demoRun) incidentMaintenance(ctx context.Context) error {
	p := d.plan
	d.setIncident(fmt.Sprintf("incident 5: gateway down for maintenance for %s", p.maintenance))
	d.con.Printf("INCIDENT 5", "the gateway goes down for maintenance for %s, longer than the QR lifetime (%s): 503 to every request", p.maintenance, p.ttl)
	d.con.Printf("", "   the per-route circuit breaker opens when half of %d attempts within %s, or every attempt for %s, met a fault: events wait PENDING, no retry spent; a probe every %s..%s",
		p.relay.breaker.MinAttempts, p.relay.breaker.Window, p.relay.breaker.FailingFor, p.relay.breaker.OpenMin, p.relay.breaker.OpenMax)
	before, err := d.routeLog(ctx)
	if err != nil {
		return fmt.Errorf("read the routes audit log: %w", err)
	}
	_, mark := d.svc.committedSince(0)
	d.gw.SetDown(true)
	downAt := time.Now()
	err = sleep(ctx, p.maintenance)
	if err == nil {
		err = d.downUntilBreakerOpens(ctx, len(before))
	}
	d.gw.SetDown(false)
	downFor := time.Since(downAt).Round(100 * time.Millisecond)
	if err != nil {
		return err
	}
	written, _ := d.svc.committedSince(mark)
	seen := map[outbox.EventID]bool{}
	var ids []outbox.EventID
	for _, e := range written {
		if !d.routedTo(destGateway, e.EventType, e.AggregateType) {
			continue // Kafka's events: the gateway's maintenance does not touch them
		}
		seen[e.ID] = true
		ids = append(ids, e.ID)
	}
	for _, id := range parseIDs(d.gw.OutageHits()) {
		if !seen[id] {
			ids = append(ids, id)
		}
	}
	d.setIncident("incident 5: maintenance over; the breaker probes")
	d.con.Printf("INCIDENT 5", "the gateway is back; %s for the gateway were written or refused during the maintenance", plural(len(ids), "event", "events"))
	// Wait for the breaker to close again (a probe delivered) and for the
	// events to be final.
	var entries []store.RouteLogEntry
	for end := time.Now().Add(p.relay.breaker.OpenMax + 10*time.Second); ; {
		all, err := d.routeLog(ctx)
		if err != nil {
			return fmt.Errorf("read the routes audit log: %w", err)
		}
		entries = all[:max(0, len(all)-len(before))]
		closed := false
		for _, e := range entries {
			closed = closed || e.To == store.BreakerClosed
		}
		if closed || time.Now().After(end) {
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	final, left, err := d.waitFinal(ctx, d.gwStore(), ids, p.ttl+10*time.Second)
	if err != nil {
		return err
	}
	// Read again: on a slow machine the breaker can close while the
	// events are being waited for.
	if all, err := d.routeLog(ctx); err == nil {
		entries = all[:max(0, len(all)-len(before))]
	}
	m := maintenanceResult{ran: true, events: len(ids), processed: final[outbox.StatusProcessed],
		failed: final[outbox.StatusFailed], expired: final[outbox.StatusExpired], moving: len(left),
		logBefore: len(before)}
	m.opened, m.closed = breakerTransitions(entries)
	for _, id := range ids {
		if r, err := d.gwStore().GetEvent(ctx, id); err == nil && r.Status == outbox.StatusExpired &&
			strings.Contains(r.LastError, "destination unavailable since") {
			m.expiredBy++
			if m.sample.IsZero() && r.EventType == "ApprovalRequested" {
				m.sample = id
			}
		}
	}
	m.mostFaults, _ = d.gw.MostOutageRequests()
	m.threshold = p.relay.breaker.MinAttempts
	d.maint = m
	if m.opened == 0 && m.mostFaults < m.threshold {
		// No relay met enough 503s: the QR codes of the events
		// written during the outage ran out before a relay claimed them.
		d.noteTooSlow(fmt.Sprintf("incident 5: the breaker did not open: in the %s the gateway was down, no relay sent it more than %d requests (%d faults within the breaker's window open it); the QR codes ran out before a relay claimed the events",
			downFor, m.mostFaults, m.threshold))
	}
	d.con.Printf("INCIDENT 5", "breaker: opened %s and closed %s (routes audit log); of the %d events: %d delivered, %d FAILED, %d EXPIRED%s",
		plural(m.opened, "time", "times"), plural(m.closed, "time", "times"), m.events, m.processed, m.failed, m.expired,
		others(final, outbox.StatusExpired, len(left)))
	d.con.Printf("", "   %d of the EXPIRED say \"destination unavailable since ...\": their QR code ran out while the route was down", m.expiredBy)
	if m.opened > 0 && m.closed == 0 {
		d.con.Printf("", "   the breaker has not closed yet: no probe got through while the demo waited (this machine is slow for the compressed time); the summary counts its transitions to the end of the run")
	}
	d.setIncident("normal traffic")
	return nil
}

// breakerTransitions counts, in entries of the routes audit log, the
// breaker's openings (not a failed probe's re-opening: that is no new
// outage) and closings.
func breakerTransitions(entries []store.RouteLogEntry) (opened, closed int) {
	for _, e := range entries {
		switch e.To {
		case store.BreakerOpen:
			if e.From != store.BreakerHalfOpen {
				opened++
			}
		case store.BreakerClosed:
			closed++
		}
	}
	return opened, closed
}

// closeLate, at the end of the run, counts the breaker's transitions
// from the start of incident 5 when the breaker had not closed by the
// time the incident stopped waiting for it: under heavy load its probe
// can take longer than the incident's wait, and it closes while later
// traffic flows.
func (d *demoRun) closeLate(ctx context.Context) {
	m := &d.maint
	if !m.ran || m.opened == 0 || m.closed > 0 {
		return
	}
	all, err := d.routeLog(ctx)
	if err != nil {
		return
	}
	if opened, closed := breakerTransitions(all[:max(0, len(all)-m.logBefore)]); closed > 0 {
		m.opened, m.closed, m.closedLate = opened, closed, true
	}
}

// incidentEDF is incident 6: the gateway slows down while a backlog of
// receipts (no deadline) waits, and QR approvals with a short deadline
// keep arriving. The same load runs twice on relay-1 alone: claimed
// earliest-deadline-first (the default), then with StrictFIFO, the
// baseline. It counts the approvals that met their deadline in each.
func (d *demoRun) incidentEDF(ctx context.Context) error {
	p := d.plan
	res := edfResult{ran: true, backlog: p.edfBacklog, deadline: p.ttl / 2, slowLatency: p.edfLatency}
	d.setIncident("incident 6: a backlog and short deadlines (earliest-deadline-first)")
	d.con.Printf("INCIDENT 6", "the gateway slows to ~%s a request; %d receipts (no deadline) queue up while %d QR approvals with a %s deadline arrive",
		res.slowLatency, res.backlog, p.edfApprovals, res.deadline)
	d.con.Printf("", "   the same load runs twice on relay-1 alone: earliest-deadline-first (the default), then --strict-fifo as the baseline")
	d.stopRelays()
	d.gw.SetLatency(res.slowLatency)
	defer d.gw.SetLatency(0)
	for i, strict := range []bool{false, true} {
		if err := d.startRelay1With(ctx, strict); err != nil {
			return err
		}
		ph, err := d.edfLoad(ctx, fmt.Sprintf("E%d", i+1), res.backlog, res.deadline)
		d.stopRelay1()
		if err != nil {
			return err
		}
		name := "earliest-deadline-first"
		if strict {
			res.fifo = ph
			name = "strict FIFO (baseline)"
		} else {
			res.edf = ph
		}
		d.con.Printf("INCIDENT 6", "%s: %d of %d approvals met their deadline, %d EXPIRED%s (load drained in %s)",
			name, ph.met, ph.approvals, ph.missed, others(nil, outbox.StatusExpired, ph.moving), ph.took.Round(100*time.Millisecond))
	}
	d.gw.SetLatency(0)
	if err := d.startRelays(ctx); err != nil {
		return err
	}
	d.edf = res
	d.con.Printf("", "   each approval that expired in the gateway's table enqueued ApprovalExpired (on_expired) there, in the same transaction: the gateway learns it ran out")
	d.setIncident("normal traffic")
	return nil
}

// edfLoad writes the backlog, then the approvals one by one over their
// deadline, and waits for all of them to be final.
func (d *demoRun) edfLoad(ctx context.Context, tag string, backlog int, deadline time.Duration) (edfPhase, error) {
	p := d.plan
	start := time.Now()
	receipts := make([]outbox.Event, backlog)
	for i := range receipts {
		body, _ := json.Marshal(map[string]any{"receipt": fmt.Sprintf("%s-R%04d", tag, i), "seq": 0})
		receipts[i] = outbox.Event{AggregateType: "receipt", AggregateID: fmt.Sprintf("%s-R%04d", tag, i), EventType: "ReceiptRequested", Payload: body}
	}
	all, err := d.svc.enqueueDirect(ctx, receipts...)
	if err != nil {
		return edfPhase{}, fmt.Errorf("incident 6: write the backlog: %w", err)
	}
	var approvals []outbox.EventID
	every := deadline / time.Duration(p.edfApprovals)
	for i := 0; i < p.edfApprovals; i++ {
		txNo := fmt.Sprintf("%s-T%04d", tag, i)
		body, _ := json.Marshal(paymentPayload{TxNo: txNo, MerchantID: "M-0001", Amount: 1000, Currency: "KRW", Seq: 0})
		ids, err := d.svc.enqueueDirect(ctx, outbox.Event{
			AggregateType: "payment", AggregateID: txNo, EventType: "ApprovalRequested", Payload: body, TTL: deadline,
			OnExpired: &outbox.Compensation{EventType: "ApprovalExpired"},
		})
		if err != nil {
			return edfPhase{}, fmt.Errorf("incident 6: write an approval: %w", err)
		}
		approvals = append(approvals, ids...)
		if err := sleep(ctx, every); err != nil {
			return edfPhase{}, err
		}
	}
	final, left, err := d.waitFinal(ctx, d.gwStore(), approvals, deadline+10*time.Second)
	if err != nil {
		return edfPhase{}, err
	}
	ph := edfPhase{approvals: len(approvals), met: final[outbox.StatusProcessed], missed: final[outbox.StatusExpired], moving: len(left)}
	// The backlog drains before the next run starts: both see the same load.
	all = append(all, approvals...)
	if _, _, err := d.waitFinal(ctx, d.gwStore(), all, 30*time.Second); err != nil {
		return ph, err
	}
	ph.took = time.Since(start)
	return ph, nil
}

// poisonOutcomes returns how many of the poison merchant's events the
// gateway refused, and how many of those ended FAILED.
func (d *demoRun) poisonOutcomes(ctx context.Context) (refused, failed int) {
	for _, id := range parseIDs(d.gw.PoisonRefused()) {
		refused++
		if r, err := d.gwStore().GetEvent(ctx, id); err == nil && r.Status == outbox.StatusFailed {
			failed++
		}
	}
	return refused, failed
}
