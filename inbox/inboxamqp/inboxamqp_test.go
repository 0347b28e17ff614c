package inboxamqp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/inbox"
	"github.com/txoutbox/outbox/inbox/inboxamqp"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/sink/amqpsink"
)

// The RabbitMQ sink's message, consumed from a queue, gives the inbox the
// event id and the aggregate.
func TestFromDeliveryOfTheSink(t *testing.T) {
	t.Parallel()
	url := testenv.AMQP.Addr(t)
	var b [5]byte
	_, _ = rand.Read(b[:])
	exchange := "ib-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// Deleted before the connection closes (defers run last first).
	defer ch.ExchangeDelete(exchange, false, false)
	// A server-named exclusive queue, deleted with the connection.
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "payment.events", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}

	s, err := amqpsink.New(ctx, amqpsink.Config{URL: url, Exchange: exchange})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	m := outbox.Message{ID: 1, EventID: outbox.NewEventID(), AggregateType: "payment", AggregateID: "tx-1001",
		EventType: "ChargeRequested", Payload: json.RawMessage(`{"amount":1500}`), Attempt: 1, CreatedAt: time.Now()}
	if errs := s.Publish(ctx, []outbox.Message{m}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	var d amqp.Delivery
	select {
	case d = <-deliveries:
	case <-ctx.Done():
		t.Fatal("nothing delivered")
	}
	got, err := inboxamqp.FromDelivery(&d)
	if err != nil || got.EventID != m.EventID.String() || got.AggregateType != "payment" || got.AggregateID != "tx-1001" {
		t.Fatalf("FromDelivery = %+v, %v; want event %s of payment/tx-1001", got, err, m.EventID)
	}
}

func TestFromDelivery(t *testing.T) {
	t.Parallel()
	d := &amqp.Delivery{MessageId: "evt-1", Headers: amqp.Table{
		"outbox-aggregate-type": "payment",
		"outbox-aggregate-id":   []byte("tx-1"),
		"outbox-aggregate-seq":  int64(3),
	}}
	got, err := inboxamqp.FromDelivery(d)
	if want := (inbox.Message{EventID: "evt-1", AggregateType: "payment", AggregateID: "tx-1", Seq: 3}); err != nil || got != want {
		t.Fatalf("FromDelivery = %+v, %v; want %+v", got, err, want)
	}
	if _, err := inboxamqp.FromDelivery(&amqp.Delivery{Body: []byte("{}")}); !errors.Is(err, inbox.ErrNoEventID) {
		t.Fatalf("no id: %v, want ErrNoEventID", err)
	}
	if _, err := inboxamqp.FromDelivery(nil); !errors.Is(err, inbox.ErrInvalidMessage) {
		t.Fatalf("nil delivery: %v", err)
	}
}
