package natssink

import (
	"testing"

	"github.com/txoutbox/outbox/sink/sinktest"
)

// FuzzParseURL: see sinktest.CheckURL. An accepted URL's route gives a
// message of plain words a subject that can be published to.
func FuzzParseURL(f *testing.F) {
	for _, rest := range []string{
		"127.0.0.1:4222", "h:4222,h2:4223?subject={aggregate_type}.events&stream=OUTBOX&stream_subjects=*.events,merchant.audit",
		"h?create_stream=false&publish_timeout=5s&reconnect_buffer=-1&name=relay", "h?subject=payment events", "h?subject={aggregate_type}..x",
		"h?stream=bad.name", "h/path", "h?subject=a&subject=b", "h?colour=1", "[::1]:4222", "h?subject={event_{aggregate_type}type}", "",
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
			return checkPublishSubject(r.Route(sinktest.PlainMessage()))
		},
	}
	f.Fuzz(func(t *testing.T, rest, password string) {
		sinktest.FuzzURL(t, p, "nats://", rest, password)
	})
}
