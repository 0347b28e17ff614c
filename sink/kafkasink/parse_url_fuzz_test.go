package kafkasink

import (
	"testing"

	"github.com/txoutbox/outbox/sink/sinktest"
)

// FuzzParseURL: see sinktest.CheckURL. An accepted URL's route gives a
// message of plain words a valid topic name.
func FuzzParseURL(f *testing.F) {
	for _, rest := range []string{
		"127.0.0.1:9092", "k1:9093,k2?topic=outbox.{aggregate_type}&client_id=relay-a&max_message_bytes=2048&produce_timeout=5s&linger=0s&tls=true",
		"k?topic={aggregate_type} events", "k?topic=pay ments", "k/topic", "k?auto_create_topics=yes", "k#frag", ",", "k?topic={tenant}",
		"k?topic=" + "{aggregate_id}" + "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
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
			return checkTopic(r.Route(sinktest.PlainMessage()))
		},
	}
	f.Fuzz(func(t *testing.T, rest, password string) {
		sinktest.FuzzURL(t, p, "kafka://", rest, password)
	})
}
