package redissink

import (
	"testing"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinktest"
)

// FuzzParseURL: see sinktest.CheckURL (Redis takes any stream name).
func FuzzParseURL(f *testing.F) {
	sinktest.FuzzURLs(f, sinktest.URLParser{
		Sink:   sinkName,
		Parse:  func(raw string) (any, error) { return ParseURL(raw) },
		Router: func(cfg any) (*sink.Router, error) { return cfg.(Config).withDefaults().validate() },
	}, "redis://",
		"127.0.0.1:6379/0", "h:6379/3?stream={aggregate_type}.events&maxlen=1000&timeout=2s&dial_timeout=1s&client_name=relay",
		"h/x", "h/-1", "h?maxlen=lots", "h?stream={x}", ":6379", "h?stream=a&stream=b", "")
}
