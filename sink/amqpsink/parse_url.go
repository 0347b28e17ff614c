package amqpsink

import (
	"net/url"

	"github.com/txoutbox/outbox/sink/sinkkit"
)

// ParseURL reads the sink URL form
//
//	amqp://user:password@host[:port]/[vhost][?option=value&...]
//
// (amqps:// for TLS) into a Config. The vhost is the path, percent-encoded
// ("/" is %2F; an empty path is the default vhost "/"). The sink's options:
//
//	exchange=NAME          Config.Exchange (default outbox)
//	routing_key=TEMPLATE   Config.Route, e.g. {aggregate_type}.events
//	publish_timeout=10s    Config.PublishTimeout
//	connect_timeout=5s     Config.ConnectTimeout
//	reconnect_wait=500ms   Config.ReconnectWait
//	max_message_size=N     Config.MaxMessageSize, in bytes
//	name=NAME              Config.ConnectionName
//	format=NAME            Config.Format: native (the default), cloudevents
//	                       or cloudevents-structured
//	source=URI             Config.Source, the CloudEvents source
//
// and the client's own, which stay in Config.URL: heartbeat, channel_max,
// frame_max, auth_mechanism, certfile, keyfile, cacertfile,
// server_name_indication. The returned Config has been validated. Errors
// match [outbox.ErrInvalidConfig] and never quote the password.
func ParseURL(raw string) (Config, error) {
	q := sinkkit.NewURLOptions(sinkName, raw)
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, q.Errorf("not a valid URL (percent-encode special characters in the password)")
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return Config{}, q.Errorf("scheme %q: use amqp:// or amqps://", u.Scheme)
	}
	if u.Hostname() == "" {
		return Config{}, q.Errorf("no host: use amqp://user:password@host:5672/vhost")
	}
	var cfg Config
	q.Parse(u.RawQuery)
	q.String("exchange", &cfg.Exchange)
	q.String("routing_key", &cfg.Route)
	q.PositiveDuration("publish_timeout", &cfg.PublishTimeout)
	q.PositiveDuration("connect_timeout", &cfg.ConnectTimeout)
	q.PositiveDuration("reconnect_wait", &cfg.ReconnectWait)
	q.PositiveInt("max_message_size", &cfg.MaxMessageSize)
	q.String("name", &cfg.ConnectionName)
	var format string
	if q.String("format", &format) {
		cfg.Format = sinkkit.Format(format)
	}
	q.String("source", &cfg.Source)
	// The client's own options stay in the URL.
	kept := q.Keep("heartbeat", "channel_max", "frame_max", "auth_mechanism", "certfile", "keyfile", "cacertfile", "server_name_indication")
	if err := q.Err(); err != nil {
		return Config{}, err
	}
	u.RawQuery = kept.Encode()
	cfg.URL = u.String()
	if _, err := cfg.withDefaults().validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
