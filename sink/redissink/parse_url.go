package redissink

import (
	"crypto/tls"
	"net/url"
	"strconv"
	"strings"

	"github.com/txoutbox/outbox/sink/sinkkit"
)

// ParseURL reads the sink URL form
//
//	redis://[[user]:password@]host[:6379][/db][?option=value&...]
//	rediss://...   (the same over TLS, with the system's root certificates)
//
// into a Config. The options:
//
//	stream=TEMPLATE    Config.Route, e.g. stream={aggregate_type}.events (the default)
//	maxlen=N           Config.MaxLen: XADD MAXLEN ~ N
//	timeout=10s        Config.Timeout
//	dial_timeout=5s    Config.DialTimeout
//	client_name=NAME   Config.ClientName
//
// The path is the database number (default 0). Per-aggregate-type routes
// have no URL form: set Config.RouteOverrides (the CLI's --route flag). The
// returned Config has been validated. Errors match
// [outbox.ErrInvalidConfig] and never quote the password.
func ParseURL(raw string) (Config, error) {
	q := sinkkit.NewURLOptions(sinkName, raw)
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, q.Errorf("is not a valid URL")
	}
	var cfg Config
	switch strings.ToLower(u.Scheme) {
	case "redis":
	case "rediss":
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
	default:
		return Config{}, q.Errorf("use the form redis://[user:password@]host:6379/0?stream={aggregate_type}.events")
	}
	if u.Host == "" || u.Hostname() == "" {
		return Config{}, q.Errorf("names no host: use redis://host:6379")
	}
	cfg.Addr = u.Host
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			return Config{}, q.Errorf("path /%s is not a database number: use /0, /1, ...", db)
		}
		cfg.DB = n
	}
	q.Parse(u.RawQuery)
	q.String("stream", &cfg.Route)
	q.Int64("maxlen", &cfg.MaxLen)
	q.Duration("timeout", &cfg.Timeout)
	q.Duration("dial_timeout", &cfg.DialTimeout)
	q.String("client_name", &cfg.ClientName)
	if err := q.Err(); err != nil {
		return Config{}, err
	}
	if _, err := cfg.withDefaults().validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
