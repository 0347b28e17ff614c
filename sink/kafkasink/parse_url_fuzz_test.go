package kafkasink

import (
	"strings"
	"testing"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// FuzzParseURL: see sinktest.CheckURL; routes must give valid topic names.
func FuzzParseURL(f *testing.F) {
	sinktest.FuzzURLs(f, sinktest.URLParser{
		Sink:        sinkName,
		Parse:       func(raw string) (any, error) { return ParseURL(raw) },
		Router:      func(cfg any) (*sink.Router, error) { return cfg.(Config).withDefaults().validate() },
		Destination: checkTopic,
	}, "kafka://",
		"127.0.0.1:9092", "k1:9093,k2?topic=outbox.{aggregate_type}&client_id=relay-a&max_message_bytes=2048&produce_timeout=5s&linger=0s&tls=true",
		"k?topic={aggregate_type} events", "k?topic=pay ments", "k/topic", "k?auto_create_topics=yes", "k#frag", ",", "k?topic={tenant}",
		"k?topic={aggregate_id}"+strings.Repeat("x", 240))
}
