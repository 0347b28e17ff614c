package demo

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/kafkasink"
)

// waitKafka waits until the consumer has read n distinct events.
func waitKafka(t *testing.T, k *Kafka, n int) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); k.Count() < n; {
		if time.Now().After(end) {
			t.Fatalf("the consumer read %d of %d events within 30s", k.Count(), n)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// TestKafkaStopStart: the broker stops and starts again on its port with
// its data; the consumer goes on from where it was, reads each event once
// (a repeat is counted, not read twice) and checks order per aggregate.
func TestKafkaStopStart(t *testing.T) {
	t.Parallel()
	k, err := StartKafka()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	cfg, err := kafkasink.ParseURL("kafka://" + k.Addr() + "?produce_timeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	publish := func(msgs ...outbox.Message) {
		t.Helper()
		sk, err := kafkasink.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer sk.Close(ctx)
		for i, err := range sk.Publish(ctx, msgs) {
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
	}
	msg := func(aggType, aggID string, seq int) outbox.Message {
		body, _ := json.Marshal(map[string]any{"seq": seq})
		return outbox.Message{EventID: outbox.NewEventID(), AggregateType: aggType, AggregateID: aggID, EventType: "E", Payload: body, Attempt: 1}
	}
	a0, a1, m0 := msg("payment", "T1", 0), msg("payment", "T1", 1), msg("merchant", "M1", 0)
	publish(a0, a1, m0)
	waitKafka(t, k, 3)

	k.Stop()
	if !k.IsDown() {
		t.Fatal("IsDown after Stop is false")
	}
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	late := msg("payment", "T1", 0) // seq 0 after seq 1: out of order
	publish(a1, late, msg("payment", "T2", 0))
	waitKafka(t, k, 5)
	r := k.Report()
	if r.Repeats != 1 || len(r.Violations) != 1 || r.Violations[0].EventID != late.EventID.String() {
		t.Errorf("repeats %d, violations %v: want 1 repeat (a1) and 1 violation (the late seq 0)", r.Repeats, r.Violations)
	}
	if r.ByTopic["payment.events"] != 4 || r.ByTopic["merchant.events"] != 1 {
		t.Errorf("by topic %v: want 4 payment.events, 1 merchant.events", r.ByTopic)
	}
	if rec := r.Received[a0.EventID.String()]; rec.AggregateID != "T1" || rec.Seq != 0 || rec.Topic != "payment.events" {
		t.Errorf("record %+v", rec)
	}
	if miss := k.Missing([]string{a0.EventID.String(), "nope"}); len(miss) != 1 || miss[0] != "nope" {
		t.Errorf("Missing = %v, want [nope]", miss)
	}
}
