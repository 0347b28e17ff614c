package amqpsink_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink/amqpsink"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		raw  string
		want amqpsink.Config
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", amqpsink.Config{URL: "amqp://guest:guest@127.0.0.1:5672/"}},
		{"amqp://u:p@h:5672/prod?exchange=payments&routing_key={aggregate_type}.{event_type}&publish_timeout=3s&connect_timeout=2s&reconnect_wait=1s&max_message_size=1048576&name=r1&heartbeat=5",
			amqpsink.Config{URL: "amqp://u:p@h:5672/prod?heartbeat=5", Exchange: "payments", Route: "{aggregate_type}.{event_type}",
				PublishTimeout: 3 * time.Second, ConnectTimeout: 2 * time.Second, ReconnectWait: time.Second, MaxMessageSize: 1 << 20, ConnectionName: "r1"}},
		{"amqps://h/%2F", amqpsink.Config{URL: "amqps://h/%2F"}},
	}
	for _, tc := range good {
		got, err := amqpsink.ParseURL(tc.raw)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.raw, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseURL(%q) =\n%+v, want\n%+v", tc.raw, got, tc.want)
		}
	}

	bad := []struct{ raw, want string }{
		{"nats://h", "scheme"},
		{"amqp:///vhost", "no host"},
		{"amqp://h?topic=x", `unknown option "topic"`},
		{"amqp://h?routing_key={aggregate}", "unknown placeholder"},
		{"amqp://h?publish_timeout=-1s", "publish_timeout"},
		{"amqp://h?max_message_size=0", "max_message_size"},
		{"amqp://h?exchange=a&exchange=b", "given 2 times"},
		{"amqp://bob:s3cret@h?oops=1", "bob:xxxxx@h"},
		{"amqp://bob:s3c%zzret@h/", "xxxxx@h"},
	}
	for _, tc := range bad {
		_, err := amqpsink.ParseURL(tc.raw)
		if err == nil || !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalidConfig mentioning %q", tc.raw, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3c") {
			t.Errorf("ParseURL(%q) error quotes the password: %v", tc.raw, err)
		}
	}
}
