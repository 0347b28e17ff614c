package amqpsink

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
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
//
// and the client's own, which stay in Config.URL: heartbeat, channel_max,
// frame_max, auth_mechanism, certfile, keyfile, cacertfile,
// server_name_indication. The returned Config has been validated. Errors
// match [outbox.ErrInvalidConfig] and never quote the password.
func ParseURL(raw string) (Config, error) {
	shown := redactURL(raw)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: amqp sink: URL %s: "+format, append([]any{outbox.ErrInvalidConfig, shown}, args...)...)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, bad("not a valid URL (percent-encode special characters in the password)")
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return Config{}, bad("scheme %q: use amqp:// or amqps://", u.Scheme)
	}
	if u.Hostname() == "" {
		return Config{}, bad("no host: use amqp://user:password@host:5672/vhost")
	}
	var cfg Config
	values, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, bad("the query is not valid: %v", err)
	}
	kept := url.Values{}
	for key, vs := range values {
		if len(vs) != 1 {
			return Config{}, bad("option %s is given %d times: keep one", key, len(vs))
		}
		v := vs[0]
		var err error
		switch key {
		case "exchange":
			cfg.Exchange = v
		case "routing_key":
			cfg.Route = v
		case "publish_timeout":
			cfg.PublishTimeout, err = parsePositiveDuration(v)
		case "connect_timeout":
			cfg.ConnectTimeout, err = parsePositiveDuration(v)
		case "reconnect_wait":
			cfg.ReconnectWait, err = parsePositiveDuration(v)
		case "max_message_size":
			cfg.MaxMessageSize, err = strconv.Atoi(v)
			if err == nil && cfg.MaxMessageSize <= 0 {
				err = fmt.Errorf("use a positive number of bytes")
			}
		case "name":
			cfg.ConnectionName = v
		case "heartbeat", "channel_max", "frame_max", "auth_mechanism", "certfile", "keyfile", "cacertfile", "server_name_indication":
			kept[key] = vs
		default:
			return Config{}, bad("unknown option %q: use exchange, routing_key, publish_timeout, connect_timeout, reconnect_wait, max_message_size or name (or the client's heartbeat, channel_max, frame_max, auth_mechanism, certfile, keyfile, cacertfile, server_name_indication)", key)
		}
		if err != nil {
			return Config{}, bad("option %s=%q: %v", key, v, err)
		}
	}
	u.RawQuery = kept.Encode()
	cfg.URL = u.String()
	if err := cfg.withDefaults().validate(); err != nil {
		return Config{}, err
	}
	if _, err := sink.NewRouter(cfg.Route, nil); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func parsePositiveDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("use a positive duration such as 5s")
	}
	return d, nil
}

// redactURL returns raw with its password replaced by xxxxx, for errors
// and logs; an unparseable URL is shown by scheme and host only.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		scheme, rest, ok := strings.Cut(raw, "://")
		if !ok {
			return "(unparseable URL)"
		}
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			rest = "xxxxx" + rest[at:]
		}
		return scheme + "://" + rest
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	return u.String()
}
