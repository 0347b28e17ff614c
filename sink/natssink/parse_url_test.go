package natssink_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/natssink"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		raw  string
		want natssink.Config
	}{
		{"nats://127.0.0.1:4222", natssink.Config{URL: "nats://127.0.0.1:4222"}},
		{"nats://h:4222?subject={aggregate_type}.audit&stream=PAY&stream_subjects=a.events,b.>&create_stream=false&publish_timeout=3s&reconnect_wait=1s&reconnect_buffer=-1&name=r1&connect_timeout=2s",
			natssink.Config{URL: "nats://h:4222", Route: "{aggregate_type}.audit", Stream: "PAY", StreamSubjects: []string{"a.events", "b.>"},
				NoCreateStream: true, PublishTimeout: 3 * time.Second, ReconnectWait: time.Second, ReconnectBufSize: -1, ClientName: "r1", ConnectTimeout: 2 * time.Second}},
		{"nats://u:p@h1:4222,h2:4223", natssink.Config{URL: "nats://u:p@h1:4222,nats://h2:4223"}},
		{"tls://h", natssink.Config{URL: "tls://h"}},
	}
	for _, tc := range good {
		got, err := natssink.ParseURL(tc.raw)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.raw, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseURL(%q) =\n%+v, want\n%+v", tc.raw, got, tc.want)
		}
	}

	bad := []struct{ raw, want string }{
		{"http://h:4222", "scheme"},
		{"nats://", "no host"},
		{"nats://h/path", "no path"},
		{"nats://h?topic=x", `unknown option "topic"`},
		{"nats://h?subject={aggregate}", "unknown placeholder"},
		{"nats://h?stream=a.b", "stream name"},
		{"nats://h?stream_subjects=a..b", "stream subject"},
		{"nats://h?publish_timeout=soon", "publish_timeout"},
		{"nats://h?create_stream=perhaps", "create_stream"},
		{"nats://h?stream=A&stream=B", "given 2 times"},
		{"nats://bob:s3cret@h?oops=1", "bob:xxxxx@h"},
		// Templates whose own text makes every subject invalid.
		{"nats://h?subject=payment%20events", `"payment events" is not a valid subject`},
		{"nats://h?subject={aggregate_type}..events", "empty token"},
		{"nats://h?subject={aggregate_type}.*", "wildcard"},
		{"nats://h?subject={event_{aggregate_type}type}", "stray brace"},
	}
	for _, tc := range bad {
		_, err := natssink.ParseURL(tc.raw)
		if err == nil || !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalidConfig mentioning %q", tc.raw, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURL(%q) error quotes the password: %v", tc.raw, err)
		}
	}
}
