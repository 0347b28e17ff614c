package redissink

import (
	"crypto/tls"
	"net/url"
	"strconv"
	"strings"
	"time"
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
	bad := func(format string, args ...any) error {
		return invalid("URL %s: "+format, append([]any{quoteURL(raw)}, args...)...)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, bad("is not a valid URL")
	}
	var cfg Config
	switch strings.ToLower(u.Scheme) {
	case "redis":
	case "rediss":
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
	default:
		return Config{}, bad("use the form redis://[user:password@]host:6379/0?stream={aggregate_type}.events")
	}
	if u.Host == "" || u.Hostname() == "" {
		return Config{}, bad("names no host: use redis://host:6379")
	}
	cfg.Addr = u.Host
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			return Config{}, bad("path /%s is not a database number: use /0, /1, ...", db)
		}
		cfg.DB = n
	}
	values, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, bad("has a malformed query: %v", err)
	}
	for key, vs := range values {
		if len(vs) != 1 {
			return Config{}, bad("option %s is given %d times: keep one", key, len(vs))
		}
		v := vs[0]
		switch key {
		case "stream":
			cfg.Route = v
		case "maxlen":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return Config{}, bad("maxlen=%q is not a whole number of entries", v)
			}
			cfg.MaxLen = n
		case "timeout", "dial_timeout":
			d, err := time.ParseDuration(v)
			if err != nil {
				return Config{}, bad("%s=%q is not a duration such as 10s", key, v)
			}
			if key == "timeout" {
				cfg.Timeout = d
			} else {
				cfg.DialTimeout = d
			}
		case "client_name":
			cfg.ClientName = v
		default:
			return Config{}, bad("unknown option %q: use stream, maxlen, timeout, dial_timeout or client_name", key)
		}
	}
	if _, err := cfg.withDefaults().validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// quoteURL shows a URL in an error without credentials or query values.
func quoteURL(raw string) string {
	s := raw
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		start := 0
		if i := strings.Index(s, "//"); i >= 0 && i < at {
			start = i + 2
		}
		s = s[:start] + "xxxxx" + s[at:]
	}
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i] + "?..."
	}
	return strconv.Quote(s)
}
