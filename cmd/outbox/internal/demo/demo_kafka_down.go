package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/txoutbox/outbox"
)

// kafkaOutageResult is what incident 7 measured.
type kafkaOutageResult struct {
	ran bool
	// down is how long the broker was stopped; gatewayDuring the
	// approvals the gateway accepted meanwhile; kafkaDuring the events the
	// consumer read meanwhile (records produced just before the stop).
	down                       time.Duration
	gatewayDuring, kafkaDuring int
	// events are those written during the outage and routed to Kafka;
	// delivered, expired and moving their outcomes at Kafka; received
	// those of the delivered the consumer read; caughtUp how long after
	// the restart.
	events, delivered, expired, moving, received int
	caughtUp                                     time.Duration
	// merchant counts the delivered merchant events (no deadline);
	// expiredDelivered the approvals EXPIRED at Kafka that the gateway
	// had in time (PROCESSED in its table).
	merchant, expiredDelivered int
	// gatewayRepeats are the repeated gateway requests from the stop to
	// the catch-up (Idempotency-Key duplicates): Kafka's outage must cause
	// none.
	gatewayRepeats int
}

// incidentKafkaDown is incident 7: the Kafka broker is stopped while the
// gateway is up, then started again on its port with its data. Each
// destination has its own table and relay: the approvals go on to the
// gateway, Kafka's events wait in Kafka's table and catch up once it is
// back, and no gateway request is repeated because of it.
func (d *demoRun) incidentKafkaDown(ctx context.Context) error {
	p := d.plan
	res := kafkaOutageResult{ran: true}
	d.setIncident(fmt.Sprintf("incident 7: Kafka down for %s, the gateway up", p.kafkaOutage))
	d.con.Printf("INCIDENT 7", "the Kafka broker stops for %s while the gateway stays up", p.kafkaOutage)
	d.con.Printf("", "   each destination has its own table and relay: approvals go on to the gateway; Kafka's events wait in %s, retried with backoff",
		d.dest(destKafka).table)
	_, mark := d.svc.committedSince(0)
	gwBefore, dupsBefore := d.gw.Counts()
	kBefore := d.kafka.Count()
	d.kafka.Stop()
	downAt := time.Now()
	err := sleep(ctx, p.kafkaOutage)
	// On a very busy machine the service may have written nothing for
	// Kafka yet, or the gateway accepted nothing: stay down until both
	// happened (bounded).
	for end := time.Now().Add(4*p.kafkaOutage + 5*time.Second); err == nil && time.Now().Before(end); {
		n, _ := d.gw.Counts()
		if n > gwBefore && d.wroteFor(destKafka, mark) {
			break
		}
		err = sleep(ctx, 50*time.Millisecond)
	}
	gwDuring, _ := d.gw.Counts()
	res.gatewayDuring, res.kafkaDuring = gwDuring-gwBefore, d.kafka.Count()-kBefore
	res.down = time.Since(downAt)
	if err != nil {
		_ = d.kafka.Start()
		return err
	}
	written, _ := d.svc.committedSince(mark)
	if err := d.kafka.Start(); err != nil {
		return err
	}
	restart := time.Now()
	var ids []outbox.EventID
	for _, e := range written {
		if d.routedTo(destKafka, e.EventType, e.AggregateType) {
			ids = append(ids, e.ID)
		}
	}
	res.events = len(ids)
	if res.events == 0 || res.gatewayDuring == 0 {
		d.noteTooSlow(fmt.Sprintf("incident 7: in the %s Kafka was down, the service wrote %s for Kafka and the gateway accepted %d",
			res.down.Round(100*time.Millisecond), plural(res.events, "event", "events"), res.gatewayDuring))
	}
	d.setIncident("incident 7: Kafka back; its relay catches up")
	d.con.Printf("INCIDENT 7", "Kafka is back on %s with its data after %s: meanwhile the gateway accepted %d events; %s for Kafka were written",
		d.kafka.Addr(), res.down.Round(100*time.Millisecond), res.gatewayDuring, plural(len(ids), "event", "events"))
	final, left, err := d.waitFinal(ctx, d.kStore(), ids, p.ttl+10*time.Second)
	if err != nil {
		return err
	}
	res.delivered, res.expired, res.moving = final[outbox.StatusProcessed], final[outbox.StatusExpired], len(left)
	// The consumer reads what Kafka's relay delivered.
	var delivered []string
	for _, id := range ids {
		r, err := d.kStore().GetEvent(ctx, id)
		switch {
		case err != nil:
		case r.Status == outbox.StatusProcessed:
			delivered = append(delivered, id.String())
			if r.AggregateType == "merchant" {
				res.merchant++
			}
		case r.Status == outbox.StatusExpired && d.routedTo(destGateway, r.EventType, r.AggregateType):
			if g, err := d.gwStore().GetEvent(ctx, id); err == nil && g.Status == outbox.StatusProcessed {
				res.expiredDelivered++
			}
		}
	}
	for end := time.Now().Add(10*time.Second + finalSlack); len(d.kafka.Missing(delivered)) > 0 && time.Now().Before(end); {
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	res.received = len(delivered) - len(d.kafka.Missing(delivered))
	res.caughtUp = time.Since(restart)
	_, dupsAfter := d.gw.Counts()
	res.gatewayRepeats = dupsAfter - dupsBefore
	d.kafkaDown = res
	d.con.Printf("INCIDENT 7", "over %s later Kafka caught up: of those %d, %d delivered (%d merchant events) and read back by the consumer (%d)%s",
		res.caughtUp.Round(100*time.Millisecond), res.events, res.delivered, res.merchant, res.received, others(final, outbox.StatusProcessed, res.moving))
	if res.expired > 0 {
		d.con.Printf("", "   the EXPIRED ran out of their QR lifetime (%s) before Kafka's relay got through again: at Kafka only; %d of them are approvals the gateway had in time",
			p.ttl, res.expiredDelivered)
	}
	d.con.Printf("", "   the gateway repeated %s because of it: Kafka's outage held nothing back at the gateway",
		plural(res.gatewayRepeats, "request", "requests"))
	d.setIncident("normal traffic")
	return nil
}

// wroteFor reports whether the service committed an event routed to dest
// since mark.
func (d *demoRun) wroteFor(dest string, mark int) bool {
	written, _ := d.svc.committedSince(mark)
	for _, e := range written {
		if d.routedTo(dest, e.EventType, e.AggregateType) {
			return true
		}
	}
	return false
}
