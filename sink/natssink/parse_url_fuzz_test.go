package natssink

import (
	"testing"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// FuzzParseURL: see sinktest.CheckURL; routes must give subjects that can
// be published to.
func FuzzParseURL(f *testing.F) {
	sinktest.FuzzURLs(f, sinktest.URLParser{
		Sink:        sinkName,
		Parse:       func(raw string) (any, error) { return ParseURL(raw) },
		Router:      func(cfg any) (*sink.Router, error) { return cfg.(Config).withDefaults().validate() },
		Destination: checkPublishSubject,
	}, "nats://",
		"127.0.0.1:4222", "h:4222,h2:4223?subject={aggregate_type}.events&stream=OUTBOX&stream_subjects=*.events,merchant.audit",
		"h?create_stream=false&publish_timeout=5s&reconnect_buffer=-1&name=relay", "h?subject=payment events", "h?subject={aggregate_type}..x",
		"h?stream=bad.name", "h/path", "h?subject=a&subject=b", "h?colour=1", "[::1]:4222", "h?subject={event_{aggregate_type}type}", "")
}
