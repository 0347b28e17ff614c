package kafkasink_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/kafkasink"
	"github.com/txoutbox/outbox/sink/sinkkit"
	"github.com/txoutbox/outbox/sink/sinktest/cetest"
)

// The official CloudEvents SDK decodes the records of both CloudEvents
// modes (the Kafka binding: ce_ headers, content-type), with every
// attribute of the mapping; the key stays the aggregate id.
func TestCloudEventsRecordsDecodeWithSDK(t *testing.T) {
	t.Parallel()
	for _, f := range []sinkkit.Format{sinkkit.FormatCloudEvents, sinkkit.FormatCloudEventsStructured} {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			prefix := uniquePrefix(t)
			topic := prefix + ".payment.events"
			c := newCluster(t, kfake.SeedTopics(1, topic))
			cfg, err := kafkasink.ParseURL("kafka://" + c.addr() + "?topic=" + prefix + ".{aggregate_type}.events&format=" + string(f) + "&source=urn:payments")
			if err != nil {
				t.Fatal(err)
			}
			s := newSink(t, cfg)
			m := cetest.Message("tx-1001")
			m.Headers["ce_id"] = "forged"
			if res := s.Publish(publishCtx(t), []outbox.Message{m}); res[0] != nil {
				t.Fatal(res[0])
			}
			r := newReader(t, c.addr(), topic)
			if _, err := r.read(publishCtx(t), 1); err != nil {
				t.Fatal(err)
			}
			rec := r.raw()[0]
			h := map[string]string{}
			for _, kv := range rec.Headers {
				if _, dup := h[kv.Key]; dup {
					t.Fatalf("header %s twice", kv.Key)
				}
				h[kv.Key] = string(kv.Value)
			}
			e, err := cetest.Decode(h, cetest.PrefixKafka, "content-type", rec.Value)
			if err != nil {
				t.Fatalf("the SDK cannot decode the record: %v", err)
			}
			if err := cetest.Check(e, &m, "urn:payments"); err != nil {
				t.Fatal(err)
			}
			if string(rec.Key) != m.AggregateID || h[sink.HeaderEventID] != m.EventID.String() || h[sink.HeaderTraceparent] != m.Headers[sink.HeaderTraceparent] {
				t.Fatalf("key %q, headers %v: the key and the outbox headers must stay", rec.Key, h)
			}
		})
	}
}

// format=debezium writes what Debezium's outbox event router writes:
// topic outbox.event.<aggregate_type> (unless a route says otherwise),
// key = aggregate id, header id = event id, value = the payload.
func TestDebeziumFormat(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(1, "outbox.event.payment", "merchant.audit"))
	cfg, err := kafkasink.ParseURL("kafka://" + c.addr() + "?format=debezium")
	if err != nil {
		t.Fatal(err)
	}
	cfg.RouteOverrides = map[string]string{"merchant": "merchant.audit"}
	s := newSink(t, cfg)
	pay := cetest.Message("tx-1")
	pay.Headers["id"] = "forged"
	mer := cetest.Message("m-1")
	mer.AggregateType = "merchant"
	if got := s.Destination(&pay); got != "outbox.event.payment" {
		t.Fatalf("Destination = %q", got)
	}
	for i, err := range s.Publish(publishCtx(t), []outbox.Message{pay, mer}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	r := newReader(t, c.addr(), "outbox.event.payment", "merchant.audit")
	if _, err := r.read(publishCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	for _, rec := range r.raw() {
		want := pay
		if rec.Topic == "merchant.audit" {
			want = mer
		} else if rec.Topic != "outbox.event.payment" {
			t.Fatalf("record on topic %s", rec.Topic)
		}
		var ids []string
		for _, h := range rec.Headers {
			if h.Key == "id" {
				ids = append(ids, string(h.Value))
			}
		}
		if string(rec.Key) != want.AggregateID || len(ids) != 1 || ids[0] != want.EventID.String() || string(rec.Value) != string(want.Payload) {
			t.Fatalf("record on %s: key %q, id headers %v, value %s; want key %s, id %s, value %s",
				rec.Topic, rec.Key, ids, rec.Value, want.AggregateID, want.EventID, want.Payload)
		}
		if rec.Headers[0].Key != "id" {
			t.Errorf("the id header comes first, got %s", rec.Headers[0].Key)
		}
	}
	if _, err := kafkasink.ParseURL("kafka://h:9092?format=avro"); err == nil {
		t.Fatal("format=avro accepted")
	}
}
