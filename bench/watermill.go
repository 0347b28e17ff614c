package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/outbox/internal/benchkit"
)

// Watermill is watermill-sql's outbox setup as its maintainers benchmark it
// (ThreeDotsLabs/watermill-benchmark, pkg/pubsub.go, "postgresql-queue"):
// the PostgreSQL queue schema with a BYTEA payload and the queue offsets
// adapter, here with SubscribeBatchSize 1000. A SQL publisher on the
// producer's transaction writes the event; a subscriber hands each message
// to a handler that counts it and acks it.
//
// The adapter acks a batch with one statement: with DeleteOnAck it deletes
// the acked rows, otherwise it sets their acked column (the default, which
// leaves every delivered row in the table).
type Watermill struct {
	// DeleteOnAck sets PostgreSQLQueueOffsetsAdapter.DeleteOnAck: acked
	// messages are deleted instead of marked acked.
	DeleteOnAck bool
	// Batch is SubscribeBatchSize. Default Env.Batch, then 1000.
	Batch int
	// PollInterval is the subscriber's wait after an empty query.
	PollInterval time.Duration

	env     benchkit.Env
	schema  wsql.PostgreSQLQueueSchema
	offsets wsql.PostgreSQLQueueOffsetsAdapter
	pool    *pgxpool.Pool
	loader  *wsql.Publisher
}

const watermillTopic = "events"

var wmLogger = watermill.NopLogger{}

// Name is "watermill-sql delete" with DeleteOnAck, else "watermill-sql acked".
func (w *Watermill) Name() string {
	if w.DeleteOnAck {
		return "watermill-sql delete"
	}
	return "watermill-sql acked"
}

func (w *Watermill) Setup(ctx context.Context, env benchkit.Env) error {
	if w.Batch == 0 {
		w.Batch = env.Batch
	}
	if w.Batch == 0 {
		w.Batch = 1000
	}
	w.schema = wsql.PostgreSQLQueueSchema{
		GeneratePayloadType: func(string) string { return "BYTEA" },
		SubscribeBatchSize:  w.Batch,
	}
	w.offsets = wsql.PostgreSQLQueueOffsetsAdapter{DeleteOnAck: w.DeleteOnAck}
	pool, err := env.NewPool(ctx, 4)
	if err != nil {
		return err
	}
	w.pool, w.env = pool, env
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(pool), wsql.SubscriberConfig{
		SchemaAdapter: w.schema, OffsetsAdapter: w.offsets, InitializeSchema: true,
	}, wmLogger)
	if err != nil {
		return err
	}
	for _, topic := range []string{watermillTopic, forwarderTopic} {
		if err := sub.SubscribeInitialize(topic); err != nil {
			return fmt.Errorf("initialize schema: %w", err)
		}
	}
	_ = sub.Close()
	w.loader, err = wsql.NewPublisher(wsql.BeginnerFromPgx(pool), wsql.PublisherConfig{SchemaAdapter: w.schema}, wmLogger)
	return err
}

func newMessage(ev benchkit.Event) *message.Message {
	return message.NewMessage(watermill.NewUUID(), ev.Payload)
}

// Produce publishes with a publisher on the producer's transaction, as
// watermill-sql documents for the outbox pattern.
func (w *Watermill) Produce(ctx context.Context, tx pgx.Tx, ev benchkit.Event) error {
	pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: w.schema}, wmLogger)
	if err != nil {
		return err
	}
	msg := newMessage(ev)
	msg.SetContext(ctx)
	return pub.Publish(watermillTopic, msg)
}

// Load publishes 1000 messages per call: one multi-row INSERT each.
func (w *Watermill) Load(ctx context.Context, events []benchkit.Event) error {
	return publishChunks(w.loader, watermillTopic, events)
}

// publishChunks publishes events to topic 1000 per Publish call (with
// watermill-sql's publisher, one multi-row INSERT each).
func publishChunks(pub message.Publisher, topic string, events []benchkit.Event) error {
	const chunk = 1000
	msgs := make([]*message.Message, 0, chunk)
	for start := 0; start < len(events); start += chunk {
		msgs = msgs[:0]
		for _, ev := range events[start:min(start+chunk, len(events))] {
			msgs = append(msgs, newMessage(ev))
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			return err
		}
	}
	return nil
}

func (w *Watermill) StartRelay(ctx context.Context, sink benchkit.Sink) (func() error, error) {
	cfg := wsql.SubscriberConfig{SchemaAdapter: w.schema, OffsetsAdapter: w.offsets, PollInterval: w.PollInterval}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(w.pool), cfg, wmLogger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	msgs, err := sub.Subscribe(ctx, watermillTopic)
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range msgs {
			sink([][]byte{msg.Payload})
			msg.Ack()
		}
	}()
	return func() error {
		cancel()
		err := sub.Close()
		<-done
		return err
	}, nil
}

// Pending counts the messages not acked: with DeleteOnAck the acked ones
// are gone, otherwise they are marked.
func (w *Watermill) Pending(ctx context.Context) (int64, error) {
	var n int64
	err := w.pool.QueryRow(ctx, `SELECT count(*) FROM `+w.schema.MessagesTable(watermillTopic)+` WHERE NOT acked`).Scan(&n)
	return n, err
}

func (w *Watermill) Reset(ctx context.Context) error {
	_, err := w.pool.Exec(ctx, `TRUNCATE `+w.schema.MessagesTable(watermillTopic)+`, `+
		w.schema.MessagesTable(forwarderTopic)+` RESTART IDENTITY`)
	return err
}

func (w *Watermill) Teardown(context.Context) error {
	if w.pool != nil {
		w.pool.Close()
	}
	return nil
}
