package natssink_test

import (
	"context"
	"log"
	"time"

	"github.com/txoutbox/outbox/relay"
	"github.com/txoutbox/outbox/sink/natssink"
)

// A relay that publishes payment events to payment.events and merchant
// events to merchant.audit, in the stream OUTBOX (created if no stream
// captures them). It needs a running NATS server with JetStream.
func Example() {
	ctx := context.Background()
	cfg, err := natssink.ParseURL("nats://127.0.0.1:4222?stream=OUTBOX&publish_timeout=5s")
	if err != nil {
		log.Fatal(err)
	}
	cfg.RouteOverrides = map[string]string{"merchant": "merchant.audit"}
	s, err := natssink.New(ctx, cfg)
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
