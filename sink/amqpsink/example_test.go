package amqpsink_test

import (
	"context"
	"log"
	"time"

	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink/amqpsink"
)

// A relay that publishes to the durable topic exchange "outbox" (declared
// if absent), payment events with routing key payment.events. A queue must
// be bound for them: an unroutable event is retried, never delivered. It
// needs a running RabbitMQ.
func Example() {
	ctx := context.Background()
	cfg, err := amqpsink.ParseURL("amqp://guest:guest@127.0.0.1:5672/?exchange=outbox&publish_timeout=5s")
	if err != nil {
		log.Fatal(err)
	}
	s, err := amqpsink.New(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	}()
	_ = relay.Config{Sink: s} // plus the Store: see the relay package
}
