package natssink_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/natssink"
	"github.com/txoutbox/outbox/sink/sinkkit"
	"github.com/txoutbox/outbox/sink/sinktest/cetest"
)

// The official CloudEvents SDK decodes the messages of both CloudEvents
// modes (the NATS binding: ce- headers, content-type), with every
// attribute of the mapping; Nats-Msg-Id stays the event id.
func TestCloudEventsMessagesDecodeWithSDK(t *testing.T) {
	url := sharedURL(t)
	_, js := jsClient(t, url)
	for _, f := range []sinkkit.Format{sinkkit.FormatCloudEvents, sinkkit.FormatCloudEventsStructured} {
		t.Run(string(f), func(t *testing.T) {
			id := uniq()
			stream := "C" + id
			t.Cleanup(func() { deleteStream(t, url, stream) })
			cfg, err := natssink.ParseURL(url + "?subject=c" + id + ".{aggregate_type}&stream=" + stream + "&stream_subjects=c" + id + ".>&format=" + string(f))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Source = "/outbox/payment_outbox"
			s := newSink(t, cfg)
			m := cetest.Message("tx-1001")
			m.Headers["ce-id"] = "forged"
			mustPublish(t, s, m)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
			if err != nil {
				t.Fatal(err)
			}
			h := map[string]string{}
			for k, v := range got.Headers() {
				if len(v) != 1 {
					t.Fatalf("header %s has %d values", k, len(v))
				}
				h[k] = v[0]
			}
			e, err := cetest.Decode(h, cetest.PrefixNATS, "content-type", got.Data())
			if err != nil {
				t.Fatalf("the SDK cannot decode the message: %v", err)
			}
			if err := cetest.Check(e, &m, "/outbox/payment_outbox"); err != nil {
				t.Fatal(err)
			}
			if h[jetstream.MsgIDHeader] != m.EventID.String() || h[sink.HeaderTraceparent] != m.Headers[sink.HeaderTraceparent] {
				t.Fatalf("headers %v: Nats-Msg-Id and traceparent must stay", h)
			}
		})
	}
	if _, err := natssink.ParseURL(url + "?format=debezium"); err == nil {
		t.Fatal("format=debezium accepted by the NATS sink")
	}
}
