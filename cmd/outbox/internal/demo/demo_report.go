package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/store"
)

// allEvents reads every row of the outbox, by event id.
func allEvents(ctx context.Context, s store.Store) (map[outbox.EventID]store.Record, error) {
	out := map[outbox.EventID]store.Record{}
	var before int64
	for {
		recs, err := s.ListEvents(ctx, store.ListFilter{BeforeID: before, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			out[r.EventID] = r
		}
		if len(recs) < 1000 {
			return out, nil
		}
		before = recs[len(recs)-1].ID
	}
}

// tableRecs are a table's rows and the first FAILED event of each
// aggregate there (later events of the aggregate wait behind it).
type tableRecs struct {
	recs     map[outbox.EventID]store.Record
	failedAt map[string]int64
}

func readTable(ctx context.Context, s store.Store) (tableRecs, error) {
	recs, err := allEvents(ctx, s)
	if err != nil {
		return tableRecs{}, err
	}
	t := tableRecs{recs: recs, failedAt: map[string]int64{}}
	for _, r := range recs {
		if r.Status == outbox.StatusFailed {
			k := r.AggregateType + "\x00" + r.AggregateID
			if id, ok := t.failedAt[k]; !ok || r.ID < id {
				t.failedAt[k] = r.ID
			}
		}
	}
	return t, nil
}

// behindDeadLetter reports whether r waits BLOCKED behind a FAILED event
// of its aggregate in its table.
func (t tableRecs) behindDeadLetter(r store.Record) bool {
	id, ok := t.failedAt[r.AggregateType+"\x00"+r.AggregateID]
	return ok && id < r.ID && r.Status == outbox.StatusBlocked
}

// account compares what the service committed and rolled back, what the
// outbox table and each destination's table hold, and what the gateway
// accepted and the Kafka consumer read.
func (d *demoRun) account(ctx context.Context) (*Summary, error) {
	out, err := readTable(ctx, d.b.Store)
	if err != nil {
		return nil, fmt.Errorf("read the outbox: %w", err)
	}
	tables := map[string]tableRecs{}
	deadLetters := 0
	for _, t := range d.dests {
		if tables[t.name], err = readTable(ctx, t.b.Store); err != nil {
			return nil, fmt.Errorf("read the table %s of destination %s: %w", t.table, t.name, err)
		}
		st, err := t.b.Store.Stats(ctx, true)
		if err != nil {
			return nil, err
		}
		deadLetters += int(st.DeadLetters)
	}
	st, err := d.b.Store.Stats(ctx, true)
	if err != nil {
		return nil, err
	}
	deadLetters += int(st.DeadLetters)
	rep := d.gw.Report()
	krep := d.kafka.Report()
	received := func(dest, id string) bool {
		if dest == destGateway {
			_, ok := rep.Accepted[id]
			return ok
		}
		_, ok := krep.Received[id]
		return ok
	}
	d.svc.mu.Lock()
	committed := append([]sentEvent(nil), d.svc.committed...)
	rolledBack := append([]outbox.EventID(nil), d.svc.rolledBack...)
	ambiguous := append([]sentEvent(nil), d.svc.ambiguous...)
	requests := d.svc.requests
	d.svc.mu.Unlock()
	for _, e := range ambiguous {
		if _, ok := out.recs[e.ID]; ok {
			committed = append(committed, e) // the commit did happen
		}
	}

	s := &Summary{
		Backend: d.b.Kind, Table: d.table, ElapsedMS: d.con.Elapsed().Milliseconds(),
		TimeScale: d.plan.scale, QRTTLMS: d.plan.ttl.Milliseconds(), Seed: d.seed,
		Payments: requests, Committed: len(committed), RolledBack: len(rolledBack),
		Duplicates: rep.Duplicates, OrderViolations: len(rep.Violations) + len(krep.Violations),
		DeadLetters: deadLetters, Alarms: int(d.alarms.Load()),
		GatewayRequests: rep.Requests, DeliveredBy: rep.ByRelay,
		TooSlow: d.tooSlow,
	}
	known := make(map[string]bool, len(committed)+len(rolledBack))
	for _, e := range committed {
		id := e.ID.String()
		known[id] = true
		seen := received(destGateway, id) || received(destKafka, id)
		r0, inOutbox := out.recs[e.ID]
		if !inOutbox {
			if !seen {
				s.Lost++
			}
			continue
		}
		recs := []store.Record{r0}
		status := r0.Status // the event's outcome over its destinations
		if r0.Status == outbox.StatusProcessed {
			s.Routed++
			to, _ := d.cfg.Resolve(r0.EventType, r0.AggregateType)
			var worst []outbox.Status
			for _, name := range to {
				r, ok := tables[name].recs[e.ID]
				if !ok {
					s.Lost++ // routed, yet missing from its destination's table
					continue
				}
				recs = append(recs, r)
				if tables[name].behindDeadLetter(r) {
					worst = append(worst, outbox.StatusSkipped) // marks "blocked behind a dead letter"
				} else {
					worst = append(worst, r.Status)
				}
			}
			status = combine(worst)
		}
		retries, retried := 0, false
		for _, r := range recs {
			retries += r.RetryCount
			// went back to PENDING for a retry at least once
			retried = retried || r.RetryCount > 1 || (r.RetryCount == 1 && r.Status != outbox.StatusFailed)
		}
		s.RetryAttempts += retries
		switch status {
		case outbox.StatusProcessed:
			s.Processed++
			if retries > 0 {
				s.RetriedDelivered++
			}
		case outbox.StatusFailed:
			s.Failed++
		case outbox.StatusExpired:
			s.Expired++
			if r, ok := tables[destGateway].recs[e.ID]; ok && r.Status == outbox.StatusExpired && received(destGateway, id) {
				s.ExpiredSeen++
			}
		case outbox.StatusSkipped:
			s.Blocked++ // held behind a dead letter, with an alarm raised: an operator's retry or skip moves it
		default:
			s.Unsettled++
		}
		if retried {
			s.Retried++
		}
	}
	for _, id := range rolledBack {
		known[id.String()] = true
		if received(destGateway, id.String()) || received(destKafka, id.String()) {
			s.RolledBackDelivered++
		}
		if _, ok := out.recs[id]; ok {
			s.RolledBackVisible++
		}
	}
	// Compensating events: written by the store in the table where an
	// event with on_expired ended EXPIRED, naming it in a header. Those
	// of the outbox table are routed on to Kafka's table.
	for _, name := range []string{"", destGateway, destKafka} {
		t := out
		if name != "" {
			t = tables[name]
		}
		for _, r := range t.recs {
			exp := r.Headers[outbox.HeaderCompensates]
			eid, err := outbox.ParseEventID(exp)
			if exp == "" || err != nil || !known[eid.String()] {
				continue
			}
			known[r.EventID.String()] = true
			switch {
			case name == "" && r.Status == outbox.StatusProcessed:
				continue // routed: counted at its destination
			case name == "":
			case r.Status == outbox.StatusProcessed && received(name, r.EventID.String()):
				s.CompensationsDelivered++
			case t.behindDeadLetter(r):
				s.CompensationsBlocked++ // behind its payment's dead letter
				s.Compensations++
				continue
			}
			s.Compensations++
			if !r.Status.Final() && !t.behindDeadLetter(r) {
				s.CompensationsUnsettled++
			}
		}
	}
	for _, t := range d.dests {
		ds := DestinationSummary{Name: t.name, Table: t.table}
		tr := tables[t.name]
		for _, r := range tr.recs {
			ds.Events++
			switch {
			case r.Status == outbox.StatusProcessed:
				ds.Processed++
				if !received(t.name, r.EventID.String()) {
					ds.Lost++
				}
			case r.Status == outbox.StatusFailed:
				ds.Failed++
			case r.Status == outbox.StatusExpired:
				ds.Expired++
			case r.Status == outbox.StatusBlocked:
				ds.Blocked++
			case !r.Status.Final():
				ds.Open++
			}
		}
		if t.name == destGateway {
			ds.Received, ds.Repeats, ds.OrderViolations = len(rep.Accepted), rep.Duplicates, len(rep.Violations)
		} else {
			ds.Received, ds.Repeats, ds.OrderViolations, ds.ByTopic = len(krep.Received), krep.Repeats, len(krep.Violations), krep.ByTopic
		}
		s.Lost += ds.Lost
		s.Destinations = append(s.Destinations, ds)
	}
	delivered := map[string]bool{}
	for id := range rep.Accepted {
		delivered[id] = true
	}
	for id := range krep.Received {
		delivered[id] = true
	}
	s.Delivered = len(delivered)
	for id := range delivered {
		if !known[id] {
			s.UnknownDelivered++
		}
	}
	if s.Failed > 0 {
		// A poison event whose outcome was recorded after incident 2
		// stopped waiting for it: the incident did show.
		s.TooSlow = slices.DeleteFunc(slices.Clone(s.TooSlow), func(why string) bool { return strings.HasPrefix(why, "incident 2:") })
		if len(s.TooSlow) == 0 {
			s.TooSlow = nil
		}
	}
	gwRecs := tables[destGateway].recs
	for _, id := range d.gw.PoisonRefused() {
		s.PoisonRefused++
		if eid, err := outbox.ParseEventID(id); err == nil && gwRecs[eid].Status == outbox.StatusExpired {
			s.PoisonRefusedExpired++
		}
	}
	d.closeLate(ctx)
	if m := d.maint; m.ran {
		s.Maintenance = &MaintenanceSummary{BreakerOpened: m.opened, BreakerClosed: m.closed, BreakerClosedLate: m.closedLate, Events: m.events,
			Processed: m.processed, Failed: m.failed, Expired: m.expired, ExpiredUnavailable: m.expiredBy,
			Moving: m.moving, MostOutageRequests: m.mostFaults, BreakerThreshold: m.threshold}
	}
	if e := d.edf; e.ran {
		s.EDF = &EDFSummary{Backlog: e.backlog, DeadlineMS: e.deadline.Milliseconds(),
			Approvals: e.edf.approvals, Met: e.edf.met, Missed: e.edf.missed,
			FIFOApprovals: e.fifo.approvals, FIFOMet: e.fifo.met, FIFOMissed: e.fifo.missed}
	}
	if k := d.kafkaDown; k.ran {
		s.KafkaOutage = &KafkaOutageSummary{DownMS: k.down.Milliseconds(), GatewayDuring: k.gatewayDuring, GatewayRepeats: k.gatewayRepeats,
			Events: k.events, Delivered: k.delivered, Expired: k.expired, Moving: k.moving, Received: k.received,
			CaughtUpMS: k.caughtUp.Milliseconds(), KafkaDuring: k.kafkaDuring}
	}
	for _, id := range d.crashIDs {
		atts, err := d.gwStore().Attempts(ctx, id)
		if err != nil {
			continue
		}
		for _, a := range atts {
			if a.Outcome == store.LeaseExpired {
				s.Reaped++
				break
			}
		}
	}
	return s, nil
}

// combine is the outcome of an event over its destinations' statuses
// (StatusSkipped standing for BLOCKED behind a dead letter): FAILED if it
// failed at one, then blocked behind a dead letter, then not final, then
// EXPIRED; PROCESSED when delivered at every one.
func combine(sts []outbox.Status) outbox.Status {
	out := outbox.StatusProcessed
	rank := func(st outbox.Status) int {
		switch st {
		case outbox.StatusFailed:
			return 4
		case outbox.StatusSkipped:
			return 3
		case outbox.StatusExpired:
			return 1
		case outbox.StatusProcessed:
			return 0
		}
		return 2 // PENDING, PROCESSING, BLOCKED not behind a dead letter
	}
	for _, st := range sts {
		if rank(st) > rank(out) {
			out = st
		}
	}
	return out
}

// unaccounted classifies a committed event found in the outbox with
// status st, which the gateway did (seen) or did not accept: unsettled if
// it is not final (the demo stopped waiting for it; a relay delivers it
// later), lost if it is PROCESSED without the gateway having it.
func unaccounted(st outbox.Status, seen bool) (unsettled, lost bool) {
	switch {
	case !st.Final():
		return true, false
	case !seen && st == outbox.StatusProcessed:
		return false, true
	}
	return false, false
}

// report prints the audit trails, the summary table and, with --json, the
// summary as the last line.
func (d *demoRun) report(ctx context.Context, s *Summary) error {
	failed := d.firstWithStatus(ctx, d.gwStore(), outbox.StatusFailed, "ApprovalRequested")
	expired, expiredAt := d.expiredSample, d.b.Store
	if expired.IsZero() {
		expired, expiredAt = d.firstWithStatus(ctx, d.gwStore(), outbox.StatusExpired, "ApprovalRequested"), d.gwStore()
	}
	var buf bytes.Buffer
	buf.WriteString("\n")
	gwTable := d.dest(destGateway).table
	for _, a := range []struct {
		what  string
		id    outbox.EventID
		s     store.Store
		table string
	}{
		{"a FAILED event (the poison merchant: dead letter + alarm)", failed, d.gwStore(), gwTable},
		{"an EXPIRED event (written while the relays were down: never routed, never sent)", expired, expiredAt, d.table},
		{"the event held when relay-2 was killed (reaped after the lease, then redelivered)", d.heldID, d.gwStore(), gwTable},
		{"an event EXPIRED during the maintenance (held back by the open breaker, then compensated)", d.maint.sample, d.gwStore(), gwTable},
	} {
		if a.id.IsZero() {
			continue
		}
		if a.s != d.b.Store {
			a.table = gwTable
		}
		fmt.Fprintf(&buf, "audit trail of %s, as `outbox events show %s --table %s` prints it:\n", a.what, a.id, a.table)
		if err := d.env.ShowEvent(ctx, &buf, a.s, a.id); err != nil {
			fmt.Fprintf(&buf, "  (cannot show it: %v)\n", err)
		}
		buf.WriteString("\n")
	}
	if err := s.WriteTable(&buf); err != nil {
		return err
	}
	if d.c.Keep {
		flags := fmt.Sprintf("--db %s --table %s", d.shownDSN(), d.table)
		fmt.Fprintf(&buf, "\nkept the database: try `outbox status %s` or `outbox events list --status failed %s`\n", flags, flags)
		fmt.Fprintf(&buf, "  each destination's own table: `outbox status --db %s --table %s` (and %s); the destinations file: %s\n",
			d.shownDSN(), d.dest(destGateway).table, d.dest(destKafka).table, filepath.Join(d.confDir, "destinations-relay-1.yaml"))
	}
	if d.c.JSON {
		j, err := s.JSON()
		if err != nil {
			return err
		}
		buf.WriteString("\n")
		buf.Write(j)
		buf.WriteString("\n")
	}
	_, err := d.con.Write(buf.Bytes())
	return err
}

// firstWithStatus returns the oldest event of eventType in status, or the
// zero id.
func (d *demoRun) firstWithStatus(ctx context.Context, s store.Store, status outbox.Status, eventType string) outbox.EventID {
	recs, err := s.ListEvents(ctx, store.ListFilter{Status: status, Limit: 1000})
	if err != nil && !errors.Is(err, context.Canceled) {
		return outbox.EventID{}
	}
	var found, oldest outbox.EventID
	for _, r := range recs { // newest first: keep the last match
		oldest = r.EventID
		if r.EventType == eventType {
			found = r.EventID
		}
	}
	if found.IsZero() {
		// None of that type: on a slow machine the poison merchant's
		// approval can expire before its refusal, and a later event of the
		// payment is the one that fails.
		return oldest
	}
	return found
}
