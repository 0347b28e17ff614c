package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// account compares what the service committed and rolled back, what the
// outbox holds and what the gateway accepted.
func (d *demoRun) account(ctx context.Context) (*Summary, error) {
	recs, err := allEvents(ctx, d.b.Store)
	if err != nil {
		return nil, fmt.Errorf("read the outbox: %w", err)
	}
	st, err := d.b.Store.Stats(ctx, true)
	if err != nil {
		return nil, err
	}
	rep := d.gw.Report()
	d.svc.mu.Lock()
	committed := append([]sentEvent(nil), d.svc.committed...)
	rolledBack := append([]outbox.EventID(nil), d.svc.rolledBack...)
	ambiguous := append([]sentEvent(nil), d.svc.ambiguous...)
	requests := d.svc.requests
	d.svc.mu.Unlock()
	for _, e := range ambiguous {
		if _, ok := recs[e.ID]; ok {
			committed = append(committed, e) // the commit did happen
		}
	}

	s := &Summary{
		Backend: d.b.Kind, Table: d.table, ElapsedMS: d.con.Elapsed().Milliseconds(),
		TimeScale: d.plan.scale, QRTTLMS: d.plan.ttl.Milliseconds(), Seed: d.seed,
		Payments: requests, Committed: len(committed), RolledBack: len(rolledBack),
		Delivered: len(rep.Accepted), Duplicates: rep.Duplicates, OrderViolations: len(rep.Violations),
		DeadLetters: int(st.DeadLetters), Alarms: int(d.alarms.Load()),
		GatewayRequests: rep.Requests, DeliveredBy: rep.ByRelay, Routes: rep.ByRoute,
		TooSlow: d.tooSlow,
	}
	// The first FAILED event of each aggregate: later events wait behind it.
	failedAt := map[string]int64{}
	for _, r := range recs {
		if r.Status == outbox.StatusFailed {
			k := r.AggregateType + "\x00" + r.AggregateID
			if id, ok := failedAt[k]; !ok || r.ID < id {
				failedAt[k] = r.ID
			}
		}
	}
	known := make(map[string]bool, len(committed)+len(rolledBack))
	for _, e := range committed {
		id := e.ID.String()
		known[id] = true
		_, seen := rep.Accepted[id]
		r, inOutbox := recs[e.ID]
		switch {
		case !inOutbox:
			if !seen {
				s.Lost++
			}
			continue
		case r.Status == outbox.StatusProcessed:
			s.Processed++
			if r.RetryCount > 0 {
				s.RetriedDelivered++
			}
		case r.Status == outbox.StatusFailed:
			s.Failed++
		case r.Status == outbox.StatusExpired:
			s.Expired++
			if seen {
				s.ExpiredSeen++
			}
		case r.Status == outbox.StatusBlocked:
			if id, ok := failedAt[r.AggregateType+"\x00"+r.AggregateID]; ok && id < r.ID {
				// Held behind a dead letter, with an alarm raised: an
				// operator's retry or skip moves it. Not dropped.
				s.Blocked++
				s.RetryAttempts += r.RetryCount
				continue
			}
		}
		s.RetryAttempts += r.RetryCount
		if r.RetryCount > 1 || (r.RetryCount == 1 && r.Status != outbox.StatusFailed) {
			s.Retried++ // went back to PENDING for a retry at least once
		}
		unsettled, lost := unaccounted(r.Status, seen)
		if unsettled {
			s.Unsettled++
		}
		if lost {
			s.Lost++
		}
	}
	for _, id := range rolledBack {
		known[id.String()] = true
		if _, ok := rep.Accepted[id.String()]; ok {
			s.RolledBackDelivered++
		}
		if _, ok := recs[id]; ok {
			s.RolledBackVisible++
		}
	}
	// Compensating events: written by the store when an event with
	// on_expired ended EXPIRED, naming it in a header.
	for _, r := range recs {
		if exp := r.Headers[outbox.HeaderCompensates]; exp != "" {
			if eid, err := outbox.ParseEventID(exp); err == nil && recs[eid].Status == outbox.StatusExpired && known[eid.String()] {
				s.Compensations++
				known[r.EventID.String()] = true
				if id, ok := failedAt[r.AggregateType+"\x00"+r.AggregateID]; ok && id < r.ID && r.Status == outbox.StatusBlocked {
					s.CompensationsBlocked++ // behind its payment's dead letter
				} else if !r.Status.Final() {
					s.CompensationsUnsettled++
				}
			}
		}
	}
	s.CompensationsDelivered = rep.Compensations["ApprovalExpired"]
	for id := range rep.Accepted {
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
	for _, id := range d.gw.PoisonRefused() {
		s.PoisonRefused++
		if eid, err := outbox.ParseEventID(id); err == nil && recs[eid].Status == outbox.StatusExpired {
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
	for _, id := range d.crashIDs {
		atts, err := d.b.Store.Attempts(ctx, id)
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
	failed := d.firstWithStatus(ctx, outbox.StatusFailed, "ApprovalRequested")
	expired := d.expiredSample
	if expired.IsZero() {
		expired = d.firstWithStatus(ctx, outbox.StatusExpired, "ApprovalRequested")
	}
	var buf bytes.Buffer
	buf.WriteString("\n")
	for _, a := range []struct {
		what string
		id   outbox.EventID
	}{
		{"a FAILED event (the poison merchant: dead letter + alarm)", failed},
		{"an EXPIRED event (written while the relays were down: never sent)", expired},
		{"the event held when relay-2 was killed (reaped after the lease, then redelivered)", d.heldID},
		{"an event EXPIRED during the maintenance (held back by the open breaker, then compensated)", d.maint.sample},
	} {
		if a.id.IsZero() {
			continue
		}
		fmt.Fprintf(&buf, "audit trail of %s, as `outbox events show %s` prints it:\n", a.what, a.id)
		if err := d.env.ShowEvent(ctx, &buf, d.b.Store, a.id); err != nil {
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
func (d *demoRun) firstWithStatus(ctx context.Context, status outbox.Status, eventType string) outbox.EventID {
	recs, err := d.b.Store.ListEvents(ctx, store.ListFilter{Status: status, Limit: 1000})
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
