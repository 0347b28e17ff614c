package amqpsink_test

import (
	"testing"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/amqpsink"
	"github.com/txoutbox/outbox/sink/sinkkit"
	"github.com/txoutbox/outbox/sink/sinktest/cetest"
)

// The official CloudEvents SDK decodes the messages of both CloudEvents
// modes (the AMQP binding: cloudEvents: headers, the content-type
// property), with every attribute of the mapping; message-id stays the
// event id.
func TestCloudEventsMessagesDecodeWithSDK(t *testing.T) {
	u := brokerURL(t)
	for _, f := range []sinkkit.Format{sinkkit.FormatCloudEvents, sinkkit.FormatCloudEventsStructured} {
		t.Run(string(f), func(t *testing.T) {
			ex := "outbox.test." + uniq()
			t.Cleanup(func() { deleteExchange(u, ex) })
			cfg, err := amqpsink.ParseURL(u + "?exchange=" + ex + "&format=" + string(f))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Source = "/outbox/payment_outbox"
			s := newSink(t, cfg)
			r := newQueueReader(t, u, ex, "#", false)
			m := cetest.Message("tx-1001")
			m.Headers["cloudEvents:id"] = "forged"
			mustPublish(t, s, m)
			d := readN(t, r, 1)[0]
			h := received(d).Headers
			h["content-type"] = d.ContentType
			e, err := cetest.Decode(h, cetest.PrefixAMQP, "content-type", d.Body)
			if err != nil {
				t.Fatalf("the SDK cannot decode the message: %v", err)
			}
			if err := cetest.Check(e, &m, "/outbox/payment_outbox"); err != nil {
				t.Fatal(err)
			}
			if d.MessageId != m.EventID.String() || h[sink.HeaderTraceparent] != m.Headers[sink.HeaderTraceparent] {
				t.Fatalf("message-id %q, headers %v: the outbox properties must stay", d.MessageId, h)
			}
		})
	}
}
