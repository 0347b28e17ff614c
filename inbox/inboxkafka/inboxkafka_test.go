package inboxkafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/inbox"
	"github.com/txoutbox/outbox/inbox/inboxkafka"
	"github.com/txoutbox/outbox/sink/kafkasink"
)

// The Kafka sink's record, as a consumer reads it back, gives the inbox
// the event id and the aggregate.
func TestFromRecordOfTheSink(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "payment.events"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := kafkasink.ParseURL("kafka://" + c.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	s, err := kafkasink.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	m := outbox.Message{ID: 1, EventID: outbox.NewEventID(), AggregateType: "payment", AggregateID: "tx-1001",
		EventType: "ChargeRequested", Payload: json.RawMessage(`{"amount":1500}`), Attempt: 1, CreatedAt: time.Now()}
	if errs := s.Publish(ctx, []outbox.Message{m}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("payment.events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rec *kgo.Record
	for rec == nil {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("no record read back")
		}
		if recs := fs.Records(); len(recs) > 0 {
			rec = recs[0]
		}
	}
	got, err := inboxkafka.FromRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	want := inbox.Message{EventID: m.EventID.String(), AggregateType: "payment", AggregateID: "tx-1001"}
	if got.EventID != want.EventID || got.AggregateType != want.AggregateType || got.AggregateID != want.AggregateID {
		t.Fatalf("FromRecord = %+v, want %+v", got, want)
	}
}

func TestFromRecord(t *testing.T) {
	t.Parallel()
	rec := &kgo.Record{Headers: []kgo.RecordHeader{
		{Key: "outbox-event-id", Value: []byte("evt-1")},
		{Key: "outbox-aggregate-type", Value: []byte("payment")},
		{Key: "outbox-aggregate-id", Value: []byte("tx-1")},
		{Key: "outbox-aggregate-seq", Value: []byte("42")},
	}}
	got, err := inboxkafka.FromRecord(rec)
	if want := (inbox.Message{EventID: "evt-1", AggregateType: "payment", AggregateID: "tx-1", Seq: 42}); err != nil || got != want {
		t.Fatalf("FromRecord = %+v, %v; want %+v", got, err, want)
	}
	if _, err := inboxkafka.FromRecord(&kgo.Record{Value: []byte("{}")}); !errors.Is(err, inbox.ErrNoEventID) {
		t.Fatalf("a record without an id: %v, want ErrNoEventID", err)
	}
	if _, err := inboxkafka.FromRecord(nil); !errors.Is(err, inbox.ErrInvalidMessage) {
		t.Fatalf("nil record: %v", err)
	}
	rec.Headers[3].Value = []byte("0")
	if _, err := inboxkafka.FromRecord(rec); !errors.Is(err, inbox.ErrInvalidMessage) {
		t.Fatalf("sequence 0: %v, want ErrInvalidMessage", err)
	}
}
