package amqpsink

import (
	"fmt"
	"testing"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// FuzzParseURL: see sinktest.CheckURL; routes must give routing keys AMQP
// allows (at most 255 bytes).
func FuzzParseURL(f *testing.F) {
	sinktest.FuzzURLs(f, sinktest.URLParser{
		Sink:   sinkName,
		Parse:  func(raw string) (any, error) { return ParseURL(raw) },
		Router: func(cfg any) (*sink.Router, error) { return cfg.(Config).withDefaults().validate() },
		Destination: func(key string) error {
			if len(key) > 255 {
				return fmt.Errorf("routing key of %d bytes", len(key))
			}
			return nil
		},
	}, "amqp://",
		"127.0.0.1:5672/", "h:5672/prod?exchange=payments&routing_key={aggregate_type}.{event_type}&publish_timeout=5s&max_message_size=1024&heartbeat=5",
		"h/%2F?name=relay-1&certfile=/a.pem&keyfile=/k.pem", "h?routing_key={nope}", "h?colour=1", "h?max_message_size=-1", "[bad", "h?exchange=a&exchange=b", "")
}
