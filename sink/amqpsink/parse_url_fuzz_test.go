package amqpsink

import (
	"fmt"
	"testing"

	"github.com/txoutbox/outbox/sink/sinktest"
)

// FuzzParseURL: see sinktest.CheckURL. An accepted URL's route gives a
// message of plain words a routing key AMQP allows (at most 255 bytes).
func FuzzParseURL(f *testing.F) {
	for _, rest := range []string{
		"127.0.0.1:5672/", "h:5672/prod?exchange=payments&routing_key={aggregate_type}.{event_type}&publish_timeout=5s&max_message_size=1024&heartbeat=5",
		"h/%2F?name=relay-1&certfile=/a.pem&keyfile=/k.pem", "h?routing_key={nope}", "h?colour=1", "h?max_message_size=-1", "[bad", "h?exchange=a&exchange=b", "",
	} {
		f.Add(rest, "s3cret-pw")
	}
	p := sinktest.URLParser{Sink: sinkName,
		Parse: func(raw string) (any, error) { return ParseURL(raw) },
		Check: func(cfg any) error {
			r, err := cfg.(Config).withDefaults().validate()
			if err != nil {
				return err
			}
			if key := r.Route(sinktest.PlainMessage()); len(key) > 255 {
				return fmt.Errorf("routing key of %d bytes", len(key))
			}
			return nil
		},
	}
	f.Fuzz(func(t *testing.T, rest, password string) {
		sinktest.FuzzURL(t, p, "amqp://", rest, password)
	})
}
