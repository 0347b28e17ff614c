package redissink

import (
	"errors"
	"testing"

	"github.com/txoutbox/outbox/sink/sinktest"
)

// FuzzParseURL: see sinktest.CheckURL. An accepted URL's route gives a
// message of plain words a stream name.
func FuzzParseURL(f *testing.F) {
	for _, rest := range []string{
		"127.0.0.1:6379/0", "h:6379/3?stream={aggregate_type}.events&maxlen=1000&timeout=2s&dial_timeout=1s&client_name=relay",
		"h/x", "h/-1", "h?maxlen=lots", "h?stream={x}", ":6379", "h?stream=a&stream=b", "",
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
			if r.Route(sinktest.PlainMessage()) == "" {
				return errors.New("empty stream name")
			}
			return nil
		},
	}
	f.Fuzz(func(t *testing.T, rest, password string) {
		sinktest.FuzzURL(t, p, "redis://", rest, password)
	})
}
