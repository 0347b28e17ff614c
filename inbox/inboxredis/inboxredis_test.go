package inboxredis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/inbox"
	"github.com/txoutbox/outbox/inbox/inboxredis"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/sink/redissink"
)

// The Redis sink's stream entry gives the inbox the event id and the
// aggregate.
func TestFromXMessageOfTheSink(t *testing.T) {
	t.Parallel()
	url := testenv.Redis.Addr(t)
	var b [5]byte
	_, _ = rand.Read(b[:])
	prefix := "ib-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := redissink.ParseURL(url + "?stream=" + prefix + ".{aggregate_type}")
	if err != nil {
		t.Fatal(err)
	}
	s, err := redissink.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	stream := prefix + ".payment"
	t.Cleanup(func() { _ = rdb.Del(context.Background(), stream).Err() })

	m := outbox.Message{ID: 1, EventID: outbox.NewEventID(), AggregateType: "payment", AggregateID: "tx-1001",
		EventType: "ChargeRequested", Payload: json.RawMessage(`{"amount":1500}`), Attempt: 1, CreatedAt: time.Now()}
	if errs := s.Publish(ctx, []outbox.Message{m}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	entries, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("XRANGE %s: %d entries, %v", stream, len(entries), err)
	}
	got, err := inboxredis.FromXMessage(entries[0])
	if err != nil || got.EventID != m.EventID.String() || got.AggregateType != "payment" || got.AggregateID != "tx-1001" {
		t.Fatalf("FromXMessage = %+v, %v; want event %s of payment/tx-1001", got, err, m.EventID)
	}
}

func TestFromXMessage(t *testing.T) {
	t.Parallel()
	got, err := inboxredis.FromXMessage(redis.XMessage{Values: map[string]any{
		"outbox-event-id": "evt-1", "outbox-aggregate-type": "payment", "outbox-aggregate-id": "tx-1", "outbox-aggregate-seq": "9",
	}})
	if want := (inbox.Message{EventID: "evt-1", AggregateType: "payment", AggregateID: "tx-1", Seq: 9}); err != nil || got != want {
		t.Fatalf("FromXMessage = %+v, %v; want %+v", got, err, want)
	}
	if _, err := inboxredis.FromXMessage(redis.XMessage{Values: map[string]any{"payload": "{}"}}); !errors.Is(err, inbox.ErrNoEventID) {
		t.Fatalf("no id: %v, want ErrNoEventID", err)
	}
}
