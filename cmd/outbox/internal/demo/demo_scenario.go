package demo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/store"
)

// scenario runs the traffic and the seven incidents, then lets every event
// settle and stops the relays.
func (d *demoRun) scenario(ctx context.Context) error {
	d.setIncident("normal traffic")
	steps := []func(context.Context) error{
		func(ctx context.Context) error { return sleep(ctx, d.plan.warmup) },
		d.incidentOutage,
		func(ctx context.Context) error { return sleep(ctx, d.plan.pause) },
		d.incidentPoison,
		func(ctx context.Context) error { return sleep(ctx, d.plan.pause) },
		d.incidentCrash,
		func(ctx context.Context) error { return sleep(ctx, d.plan.pause) },
		d.incidentRestart,
		func(ctx context.Context) error { return sleep(ctx, d.plan.pause) },
		d.incidentMaintenance,
		func(ctx context.Context) error { return sleep(ctx, d.plan.pause) },
		d.incidentEDF,
		func(ctx context.Context) error { return sleep(ctx, d.plan.pause) },
		d.incidentKafkaDown,
		func(ctx context.Context) error { return sleep(ctx, d.plan.tail) },
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	d.svc.stopService()
	requests, committed, rolledBack := d.svc.counts()
	d.con.Printf("service", "stopped after %d QR confirmations: %d events committed, %d rolled back", requests, committed, rolledBack)
	if err := d.settle(ctx); err != nil {
		return err
	}
	d.stopRelays()
	d.stopProgress()
	d.stopProgress = nil
	return nil
}

// startRelays starts relay-1 (in this process) and relay-2 (a process).
func (d *demoRun) startRelays(ctx context.Context) error {
	if err := d.startRelay1(ctx); err != nil {
		return err
	}
	return d.startRelay2()
}

func (d *demoRun) startRelay1(ctx context.Context) error { return d.startRelay1With(ctx, false) }

// startRelay1With starts relay-1, claiming strictly FIFO if strictFIFO:
// the router and a relay per destination table (see fanOutConfigs).
func (d *demoRun) startRelay1With(ctx context.Context, strictFIFO bool) error {
	t := d.plan.relay
	cfgs, err := d.fanOutConfigs(ctx, relay.Config{
		RelayID:   "relay-1",
		BatchSize: t.batch, PollInterval: t.poll, Lease: t.lease, MaxRetries: t.maxRetries,
		BackoffMin: t.backoffMin, BackoffMax: t.backoffMax, SweepInterval: t.sweep,
		OnFailure: relay.BlockAggregate, StopTimeout: t.stopTimeout, Breaker: t.breaker, StrictFIFO: strictFIFO,
		Logger:   consoleLogger(d.con, "relay-1", d.env.Redact),
		OnFailed: d.onFailed,
	})
	if err != nil {
		return err
	}
	r, err := startInProcRelay(ctx, cfgs...)
	if err != nil {
		closeSinks(ctx, cfgs)
		return err
	}
	d.mu.Lock()
	d.r1 = r
	d.mu.Unlock()
	return nil
}

// startRelay2 starts relay-2: `outbox relay --config FILE`, with relay-2's
// destinations file.
func (d *demoRun) startRelay2() error {
	t := d.plan.relay
	settings := map[string]string{
		"OUTBOX_DB":             d.dsn,
		"OUTBOX_TABLE":          d.table,
		"OUTBOX_CONFIG":         d.cfg2File,
		"OUTBOX_RELAY_ID":       "relay-2",
		"OUTBOX_BATCH":          fmt.Sprint(t.batch),
		"OUTBOX_POLL_INTERVAL":  t.poll.String(),
		"OUTBOX_LEASE":          t.crashLease.String(),
		"OUTBOX_MAX_RETRIES":    fmt.Sprint(t.maxRetries),
		"OUTBOX_BACKOFF_MIN":    t.backoffMin.String(),
		"OUTBOX_BACKOFF_MAX":    t.backoffMax.String(),
		"OUTBOX_SWEEP_INTERVAL": t.sweep.String(),
		"OUTBOX_RETENTION":      "0s",
		"OUTBOX_ON_FAILURE":     "block",
		"OUTBOX_STOP_TIMEOUT":   t.stopTimeout.String(),
		"OUTBOX_PROGRESS":       "0s",
		"OUTBOX_LOG_LEVEL":      "warn",
		"OUTBOX_LOG_FORMAT":     "text",
	}
	breakerEnv(t.breaker, settings)
	env := childRelayEnv(settings)
	c, err := startChildRelay(env, d.con, d.env.Redact, func(f failedLine) {
		d.alarms.Add(1)
		d.con.Printf("ALARM", "%s", f.alarmText("relay-2's ERROR log line: a relay process alerts through its log"))
	})
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.r2 = c
	d.mu.Unlock()
	return nil
}

func (d *demoRun) currentR2() *childRelay {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.r2
}

// stopRelay1 stops relay-1 cleanly, if it runs.
func (d *demoRun) stopRelay1() {
	d.mu.Lock()
	r1 := d.r1
	d.r1 = nil
	d.mu.Unlock()
	if r1 != nil {
		if err := r1.stop(); err != nil {
			d.env.Logger.Warn("relay-1", "err", err)
		}
	}
}

// stopRelays stops both relays cleanly, if they run.
func (d *demoRun) stopRelays() {
	d.mu.Lock()
	r1, r2 := d.r1, d.r2
	d.r1, d.r2 = nil, nil
	d.mu.Unlock()
	if r2 != nil {
		if err := r2.stop(d.plan.relay.stopTimeout + 10*time.Second); err != nil {
			d.env.Logger.Warn("relay-2", "err", err)
		}
	}
	if r1 != nil {
		if err := r1.stop(); err != nil {
			d.env.Logger.Warn("relay-1", "err", err)
		}
	}
}

// nudge wakes relay-1 after a commit: the source's hybrid path.
func (d *demoRun) nudge() {
	d.mu.Lock()
	r := d.r1
	d.mu.Unlock()
	if r != nil {
		r.r.Notify()
	}
}

// onFailed is relay-1's alarm callback.
func (d *demoRun) onFailed(_ context.Context, fe relay.FailedEvent) {
	d.alarms.Add(1)
	f := failedLine{fe.AggregateType, fe.AggregateID, fe.EventType, strconv.Itoa(fe.Attempts), fe.Reason}
	d.con.Printf("ALARM", "%s", f.alarmText("relay-1's OnFailed callback"))
}

// finalSlack is how much longer than its timeout waitFinal waits: a
// loaded machine (a CI runner with other suites beside the demo) slows
// the relays and the sweeper by seconds, and waiting longer costs nothing
// when the events are final sooner.
const finalSlack = 50 * time.Second

// waitFinal polls until every event in ids is in a final status in the
// table of s, or timeout (how long that takes on a quiet machine) plus
// finalSlack. An event missing from a destination table that ended
// EXPIRED or FAILED in the outbox table (never routed) counts with that
// status. It returns the count per status of those that are final and
// the ids that are not.
func (d *demoRun) waitFinal(ctx context.Context, s store.Store, ids []outbox.EventID, timeout time.Duration) (map[outbox.Status]int, []outbox.EventID, error) {
	final := map[outbox.Status]int{}
	left := append([]outbox.EventID(nil), ids...)
	deadline := time.Now().Add(timeout + finalSlack)
	for {
		var still []outbox.EventID
		for _, id := range left {
			r, err := s.GetEvent(ctx, id)
			if notInOutbox(err) && s != d.b.Store {
				if r0, err0 := d.b.Store.GetEvent(ctx, id); err0 == nil && r0.Status.Final() && r0.Status != outbox.StatusProcessed {
					r, err = r0, nil
				}
			}
			switch {
			case err == nil && r.Status.Final():
				final[r.Status]++
			case err == nil, errors.Is(err, outbox.ErrNotFound):
				still = append(still, id)
			default:
				if ctx.Err() != nil {
					return final, left, ctx.Err()
				}
				still = append(still, id)
			}
		}
		left = still
		if len(left) == 0 || time.Now().After(deadline) {
			return final, left, nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return final, left, err
		}
	}
}

func parseIDs(ss []string) []outbox.EventID {
	ids := make([]outbox.EventID, 0, len(ss))
	for _, s := range ss {
		if id, err := outbox.ParseEventID(s); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// others describes the outcomes in final other than main (and PROCESSED),
// and the events still moving: "" when there are none.
func others(final map[outbox.Status]int, main outbox.Status, moving int) string {
	var parts []string
	for _, st := range []outbox.Status{outbox.StatusProcessed, outbox.StatusFailed, outbox.StatusExpired, outbox.StatusSkipped} {
		if st != main && st != outbox.StatusProcessed && final[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", final[st], st))
		}
	}
	if moving > 0 {
		parts = append(parts, fmt.Sprintf("%d not final yet", moving))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// incidentOutage is incident 1: the gateway is down for a few seconds.
func (d *demoRun) incidentOutage(ctx context.Context) error {
	p := d.plan
	d.setIncident(fmt.Sprintf("incident 1: gateway down for %s", p.outage))
	d.con.Printf("INCIDENT 1", "the payment gateway goes down for %s: every request gets 503 Service Unavailable", p.outage)
	d.con.Printf("", "   events stay PENDING and are retried with exponential backoff (%s, %s, %s... up to %s, with jitter)",
		p.relay.backoffMin, 2*p.relay.backoffMin, 4*p.relay.backoffMin, p.relay.backoffMax)
	d.gw.SetDown(true)
	err := sleep(ctx, p.outage)
	// On a very busy machine the relays may not have tried anything yet:
	// stay down until the gateway has refused something (bounded).
	for end := time.Now().Add(4*p.outage + 2*time.Second); err == nil && len(d.gw.OutageHits()) == 0 && time.Now().Before(end); {
		err = sleep(ctx, 50*time.Millisecond)
	}
	d.gw.SetDown(false)
	if err != nil {
		return err
	}
	hits := parseIDs(d.gw.OutageHits())
	d.setIncident("incident 1: gateway back; retries catch up")
	d.con.Printf("INCIDENT 1", "the gateway is back; %s got a 503 during the outage and wait for their next retry",
		plural(len(hits), "event", "events"))
	start := time.Now()
	final, left, err := d.waitFinal(ctx, d.gwStore(), hits, p.ttl+10*time.Second)
	if err != nil {
		return err
	}
	d.con.Printf("INCIDENT 1", "over %s later: of those %d, %d were delivered after retries%s",
		time.Since(start).Round(100*time.Millisecond), len(hits), final[outbox.StatusProcessed],
		others(final, outbox.StatusProcessed, len(left)))
	d.setIncident("normal traffic")
	return nil
}

// poisonRounds bounds how often incident 2 writes the poison merchant's
// payments again when every approval expired before it was sent.
const poisonRounds = 3

// poisonRound has the poison merchant take p.poison payments, and waits
// until their approvals and cancels are written. from is how many poison
// events earlier rounds wrote; it returns the new count.
func (d *demoRun) poisonRound(ctx context.Context, from int) (approvals, cancels []outbox.EventID, next int, err error) {
	p := d.plan
	d.svc.injectPoison(p.poison)
	deadline := time.Now().Add(time.Duration(float64(p.poison)/p.rate*float64(time.Second)) + p.ttl + 5*time.Second)
	for {
		all := d.svc.poisonEvents()
		approvals, cancels, next = approvals[:0], cancels[:0], len(all)
		for _, e := range all[min(from, len(all)):] {
			if e.EventType == "ApprovalRequested" {
				approvals = append(approvals, e.ID)
			} else {
				cancels = append(cancels, e.ID)
			}
		}
		if len(cancels) >= p.poison || time.Now().After(deadline) {
			return approvals, cancels, next, nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, nil, next, err
		}
	}
}

// incidentPoison is incident 2: a merchant whose requests are invalid.
func (d *demoRun) incidentPoison(ctx context.Context) error {
	p := d.plan
	d.setIncident("incident 2: poison merchant " + poisonMerchant)
	d.con.Printf("INCIDENT 2", "merchant %s takes %d payments, but its registration is invalid: the gateway answers 400 Bad Request",
		poisonMerchant, p.poison)
	d.con.Printf("", "   400 is permanent: no retry; FAILED at the gateway -> dead letter -> alarm. Kafka still gets its payments' events; other payments flow")
	before, _ := d.gw.Counts()
	// On a machine too slow for the compressed QR lifetime, the approvals
	// can all run out before a relay sends one: then no 400 was seen, and
	// the merchant takes more payments (at most poisonRounds times).
	var approvals, cancels []outbox.EventID
	var final map[outbox.Status]int
	var left []outbox.EventID
	round := 1
	for from := 0; ; round++ {
		var err error
		approvals, cancels, from, err = d.poisonRound(ctx, from)
		if err != nil {
			return err
		}
		if final, left, err = d.waitFinal(ctx, d.gwStore(), approvals, 10*time.Second); err != nil {
			return err
		}
		if final[outbox.StatusFailed] > 0 || final[outbox.StatusExpired] < len(approvals) || round == poisonRounds {
			break
		}
		d.con.Printf("", "   all %d approvals ran out before the gateway refused one (this machine is slow for a %s QR lifetime): %d more payments of %s",
			len(approvals), p.ttl, p.poison, poisonMerchant)
	}
	// The cancels go to Kafka only: a refusal at the gateway holds
	// nothing back there. They are delivered (or EXPIRED, if their QR
	// code ran out first).
	cfinal, cleft, err := d.waitFinal(ctx, d.kStore(), cancels, p.ttl+5*time.Second)
	if err != nil {
		return err
	}
	// A refused event whose relay lost its lease before recording the
	// answer (at a busy time) is claimed again and, its QR code run
	// out, ends EXPIRED: the 400 was seen but not recorded.
	refused, failed := d.poisonOutcomes(ctx)
	if failed == 0 {
		d.noteTooSlow(fmt.Sprintf("incident 2: no approval of %s ended FAILED: in %s the gateway refused %d, whose relays lost their lease before recording it; every other approval ran out before a relay sent it",
			poisonMerchant, plural(round, "round", "rounds"), refused))
	}
	after, _ := d.gw.Counts()
	d.con.Printf("INCIDENT 2", "%d of %d approvals FAILED at the gateway and were dead-lettered%s; Kafka got %d of their %d CancelRequested%s",
		final[outbox.StatusFailed], len(approvals), others(final, outbox.StatusFailed, len(left)),
		cfinal[outbox.StatusProcessed], len(cancels), others(cfinal, outbox.StatusProcessed, len(cleft)))
	d.con.Printf("", "   a refusal holds that payment back at the gateway only: the gateway accepted %d other events meanwhile", after-before)
	d.setIncident("normal traffic")
	return nil
}

// incidentCrash is incident 3: relay-2 is killed (SIGKILL) while the
// gateway holds one of its requests, so its batch is neither marked nor
// released; the reaper returns the rows after relay-2's lease.
func (d *demoRun) incidentCrash(ctx context.Context) error {
	p := d.plan
	r2 := d.currentR2()
	if r2 == nil {
		return errors.New("relay-2 is not running")
	}
	d.setIncident("incident 3: relay-2 crashes mid-batch")
	d.con.Printf("INCIDENT 3", "relay-2 (pid %d) is about to crash mid-batch: the gateway approves its next request but holds the answer", r2.pid())
	// relay-1 stops (cleanly, marking its batch) so that relay-2 surely
	// takes the next events, however busy the machine and whichever relay
	// is faster; it comes back right after the crash and redelivers.
	held := d.gw.HoldNext("relay-2")
	d.stopRelay1()
	d.con.Printf("", "   relay-1 steps aside for a moment, so that the next batch is relay-2's")
	var h Held
	got := false
	t := time.NewTimer(p.holdWait)
	select {
	case h = <-held:
		got = true
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
	t.Stop()
	r2.kill()
	d.mu.Lock()
	d.r2 = nil
	d.mu.Unlock()
	d.gw.ReleaseHeld()
	if err := d.startRelay1(ctx); err != nil {
		return err
	}
	if !got {
		d.con.Printf("INCIDENT 3", "relay-2 sent nothing within %s (no traffic reached it); killed it with SIGKILL anyway", p.holdWait)
		d.setIncident("normal traffic")
		return nil
	}
	id, err := outbox.ParseEventID(h.EventID)
	if err != nil {
		return fmt.Errorf("the gateway held a request with Idempotency-Key %q: %w", h.EventID, err)
	}
	d.heldID = id
	d.con.Printf("INCIDENT 3", "SIGKILL relay-2 while the gateway held %s/%s %s: approved, but relay-2 never got the answer",
		h.AggregateType, h.AggregateID, h.EventType)
	rec, err := d.gwStore().GetEvent(ctx, id)
	if err != nil {
		return err
	}
	var batch []outbox.EventID
	if rec.Status == outbox.StatusProcessing && rec.LockToken != "" {
		procs, err := d.gwStore().ListEvents(ctx, store.ListFilter{Status: outbox.StatusProcessing, Limit: 1000})
		if err != nil {
			return err
		}
		for _, r := range procs {
			if r.LockToken == rec.LockToken {
				batch = append(batch, r.EventID)
			}
		}
		d.con.Printf("", "   its batch (%s) stays PROCESSING: nobody marks it until its lease ends at %s (%s lease)",
			plural(len(batch), "event", "events"), rec.LockedUntil.UTC().Format("15:04:05.000"), p.relay.crashLease)
	} else {
		batch = []outbox.EventID{id}
		d.con.Printf("", "   the held event is %s", rec.Status)
	}
	d.crashIDs = batch
	_, dupsBefore := d.gw.Counts()
	start := time.Now()
	final, left, err := d.waitFinal(ctx, d.gwStore(), batch, p.relay.crashLease+p.ttl+10*time.Second)
	if err != nil {
		return err
	}
	_, dupsAfter := d.gw.Counts()
	d.con.Printf("INCIDENT 3", "over %s later: the reaper returned them to PENDING (LEASE_EXPIRED in the audit trail) and relay-1 redelivered:",
		time.Since(start).Round(100*time.Millisecond))
	d.con.Printf("", "   %d delivered%s; the gateway recognised %s by Idempotency-Key and did not approve twice",
		final[outbox.StatusProcessed], others(final, outbox.StatusProcessed, len(left)),
		plural(dupsAfter-dupsBefore, "duplicate", "duplicates"))
	d.setIncident("normal traffic (relay-1 alone)")
	return nil
}

// incidentRestart is incident 4: every relay is down for longer than the
// QR lifetime while the service keeps confirming QR codes.
func (d *demoRun) incidentRestart(ctx context.Context) error {
	p := d.plan
	d.setIncident(fmt.Sprintf("incident 4: relays down for %s (QR lifetime %s)", p.restartDown, p.ttl))
	d.con.Printf("INCIDENT 4", "a deploy restarts the relays and takes %s, longer than the QR lifetime (%s = 66s / %g)", p.restartDown, p.ttl, p.scale)
	d.con.Printf("", "   the service keeps confirming QR codes; their events wait in the outbox, committed and audited")
	_, mark := d.svc.committedSince(0)
	d.stopRelays()
	if err := sleep(ctx, p.restartDown); err != nil {
		return err
	}
	written, _ := d.svc.committedSince(mark)
	if err := d.startRelays(ctx); err != nil {
		return err
	}
	d.setIncident("incident 4: relays back; expired events are never sent")
	d.con.Printf("INCIDENT 4", "relays back: relay-1, and relay-2 as a new process (pid %d); %s were written while none ran",
		d.currentR2().pid(), plural(len(written), "event", "events"))
	ids := make([]outbox.EventID, len(written))
	for i, e := range written {
		ids[i] = e.ID
	}
	final, left, err := d.waitFinal(ctx, d.b.Store, ids, p.ttl+10*time.Second)
	if err != nil {
		return err
	}
	for _, e := range written {
		if e.EventType != "ApprovalRequested" {
			continue
		}
		if r, err := d.b.Store.GetEvent(ctx, e.ID); err == nil && r.Status == outbox.StatusExpired { // never routed
			d.expiredSample = e.ID
			break
		}
	}
	d.con.Printf("INCIDENT 4", "over: %d outlived their QR code and ended EXPIRED in the outbox table, never routed nor sent; %d were still in time and were routed to their destinations%s",
		final[outbox.StatusExpired], final[outbox.StatusProcessed], others(final, outbox.StatusExpired, len(left)))
	d.con.Printf("", "   the outbox kept every intent and its audit trail, but no replay can revive an expired QR code:")
	d.con.Printf("", "   it buys consistency and an audit trail, not a higher success rate")
	d.setIncident("normal traffic")
	return nil
}

// settle waits until no event is PENDING, PROCESSING or BLOCKED in the
// outbox table and the destination tables. It gives up when no event has
// reached a final status for settleIdle (the QR lifetime plus 20 s, at
// least a minute), or after settleMax in all: on a loaded machine the
// relays can fall far behind, and an event still in a table is not lost
// (the summary counts it as unsettled).
func (d *demoRun) settle(ctx context.Context) error {
	d.setIncident("settling: waiting for every event to reach a final status")
	idle := max(d.plan.ttl+20*time.Second, settleIdle)
	start := time.Now()
	lastFinal, moved := int64(-1), start
	for {
		var open, final int64
		for _, s := range d.allStores() {
			st, err := s.Stats(ctx, true)
			if err != nil {
				return err
			}
			open += st.Counts[outbox.StatusPending] + st.Counts[outbox.StatusProcessing] + st.Counts[outbox.StatusBlocked]
			final += st.Counts[outbox.StatusProcessed] + st.Counts[outbox.StatusFailed] + st.Counts[outbox.StatusExpired] + st.Counts[outbox.StatusSkipped]
		}
		if open == 0 {
			d.con.Printf("settled", "every committed event is PROCESSED, FAILED or EXPIRED in the outbox table and at each destination")
			return nil
		}
		if waiting, blocked, err := d.onlyWaitingForOperator(ctx); err != nil {
			return err
		} else if waiting && blocked == 0 {
			d.con.Printf("settled", "every committed event is PROCESSED, FAILED or EXPIRED in the outbox table and at each destination")
			return nil
		} else if waiting {
			d.con.Printf("settled", "every committed event is final, except %d BLOCKED behind a dead letter: they wait for an operator (outbox events retry|skip)", blocked)
			return nil
		}
		now := time.Now()
		if final > lastFinal {
			lastFinal, moved = final, now
		}
		if now.Sub(moved) > idle || now.Sub(start) > settleMax {
			d.con.Printf("settled", "gave up waiting after %s (%s without an event reaching a final status): %d events are still PENDING, PROCESSING or BLOCKED; they stay in their tables",
				now.Sub(start).Round(100*time.Millisecond), now.Sub(moved).Round(100*time.Millisecond), open)
			return nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// settleIdle and settleMax bound settle (see there).
const (
	settleIdle = time.Minute
	settleMax  = 3 * time.Minute
)

// onlyWaitingForOperator reports whether nothing can move without an
// operator any more, in any table: no relay can move an event, and no
// BLOCKED event has a deadline ahead (at which the reaper would expire
// it). It also returns the number of BLOCKED events.
func (d *demoRun) onlyWaitingForOperator(ctx context.Context) (bool, int, error) {
	waiting, total := true, 0
	now := time.Now()
	for _, s := range d.allStores() {
		n, err := s.CountMovable(ctx, true)
		if err != nil || n > 0 {
			return false, 0, err
		}
		blocked, err := s.ListEvents(ctx, store.ListFilter{Status: outbox.StatusBlocked, Limit: 1000})
		if err != nil {
			return false, 0, err
		}
		total += len(blocked)
		for _, r := range blocked {
			if !r.ExpiresAt.IsZero() && r.ExpiresAt.After(now.Add(-time.Second)) {
				waiting = false
			}
		}
	}
	return waiting, total, nil
}
