package inboxnats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/inbox"
	"github.com/txoutbox/outbox/inbox/inboxnats"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/sink/natssink"
)

// The NATS sink's message, read back as a core NATS message and as a
// JetStream stream message, gives the inbox the event id and the
// aggregate.
func TestFromMsgOfTheSink(t *testing.T) {
	t.Parallel()
	url := testenv.NATS.Addr(t)
	var b [5]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := "IB" + id
	defer js.DeleteStream(context.Background(), stream) // before the connection closes
	sub, err := nc.SubscribeSync("ib" + id + ".>")
	if err != nil {
		t.Fatal(err)
	}
	s, err := natssink.New(ctx, natssink.Config{URL: url, Route: "ib" + id + ".{aggregate_type}", Stream: stream,
		StreamSubjects: []string{"ib" + id + ".>"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	m := outbox.Message{ID: 1, EventID: outbox.NewEventID(), AggregateType: "payment", AggregateID: "tx-1001",
		EventType: "ChargeRequested", Payload: json.RawMessage(`{"amount":1500}`), Attempt: 1, CreatedAt: time.Now()}
	if errs := s.Publish(ctx, []outbox.Message{m}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	want := inbox.Message{EventID: m.EventID.String(), AggregateType: "payment", AggregateID: "tx-1001"}

	msg, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := inboxnats.FromMsg(msg); err != nil || got.EventID != want.EventID || got.AggregateType != want.AggregateType || got.AggregateID != want.AggregateID {
		t.Fatalf("FromMsg = %+v, %v; want %+v", got, err, want)
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := inboxnats.FromHeader(raw.Header); err != nil || got.EventID != want.EventID {
		t.Fatalf("FromHeader(stream message) = %+v, %v; want %+v", got, err, want)
	}
}

func TestFromMsg(t *testing.T) {
	t.Parallel()
	msg := &nats.Msg{Header: nats.Header{}}
	msg.Header.Set("Nats-Msg-Id", "evt-1")
	msg.Header.Set("outbox-aggregate-type", "payment")
	msg.Header.Set("outbox-aggregate-id", "tx-1")
	msg.Header.Set("outbox-aggregate-seq", "7")
	got, err := inboxnats.FromMsg(msg)
	if want := (inbox.Message{EventID: "evt-1", AggregateType: "payment", AggregateID: "tx-1", Seq: 7}); err != nil || got != want {
		t.Fatalf("FromMsg (Nats-Msg-Id only) = %+v, %v; want %+v", got, err, want)
	}
	msg.Header.Set("outbox-event-id", "evt-2")
	if _, err := inboxnats.FromMsg(msg); !errors.Is(err, inbox.ErrInvalidMessage) {
		t.Fatalf("two different ids: %v, want ErrInvalidMessage", err)
	}
	if _, err := inboxnats.FromMsg(&nats.Msg{Data: []byte("{}")}); !errors.Is(err, inbox.ErrNoEventID) {
		t.Fatalf("no id: %v, want ErrNoEventID", err)
	}
	if _, err := inboxnats.FromMsg(nil); !errors.Is(err, inbox.ErrInvalidMessage) {
		t.Fatalf("nil message: %v", err)
	}
}
