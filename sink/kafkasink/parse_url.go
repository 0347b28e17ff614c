package kafkasink

import (
	"crypto/tls"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ParseURL reads the sink URL form
//
//	kafka://host:9092[,host2:9092...][/][?option=value&...]
//
// into a Config. The options:
//
//	topic=TEMPLATE          Config.Route, e.g. topic={aggregate_type}.events (the default)
//	client_id=NAME          Config.ClientID
//	max_message_bytes=N     Config.MaxMessageBytes
//	produce_timeout=30s     Config.ProduceTimeout
//	linger=5ms              Config.Linger
//	tls=true                Config.TLS: TLS with the system's root certificates
//	auto_create_topics=true Config.AllowAutoTopicCreation
//
// A port left out is 9092. Per-aggregate-type routes have no URL form: set
// Config.RouteOverrides (the CLI's --route flag). The returned Config has
// been validated. Errors match [outbox.ErrInvalidConfig].
func ParseURL(raw string) (Config, error) {
	bad := func(format string, args ...any) error {
		return invalid("URL %s: "+format, append([]any{quoteURL(raw)}, args...)...)
	}
	rest, ok := strings.CutPrefix(raw, "kafka://")
	if !ok {
		if i := strings.Index(raw, "://"); i > 0 && strings.EqualFold(raw[:i], "kafka") {
			rest, ok = raw[i+3:], true
		}
	}
	if !ok {
		return Config{}, bad("use the form kafka://host:9092[,host2:9092]?topic={aggregate_type}.events")
	}
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		rest = rest[:i]
	}
	authority, query, _ := strings.Cut(rest, "?")
	if path := strings.IndexByte(authority, '/'); path >= 0 {
		if strings.Trim(authority[path:], "/") != "" {
			return Config{}, bad("has a path; a Kafka URL names brokers only: put the topic in ?topic=")
		}
		authority = authority[:path]
	}
	if strings.Contains(authority, "@") {
		return Config{}, bad("has credentials; SASL is not supported by the kafka sink yet: remove user:password@")
	}
	var cfg Config
	for b := range strings.SplitSeq(authority, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	if len(cfg.Brokers) == 0 {
		return Config{}, bad("names no broker: use kafka://host:9092")
	}
	values, err := url.ParseQuery(query)
	if err != nil {
		return Config{}, bad("has a malformed query: %v", err)
	}
	for key, vs := range values {
		if len(vs) != 1 {
			return Config{}, bad("option %s is given %d times: keep one", key, len(vs))
		}
		v := vs[0]
		switch key {
		case "topic":
			cfg.Route = v
		case "client_id":
			cfg.ClientID = v
		case "max_message_bytes":
			n, err := strconv.Atoi(v)
			if err != nil {
				return Config{}, bad("max_message_bytes=%q is not a whole number of bytes", v)
			}
			cfg.MaxMessageBytes = n
		case "produce_timeout", "linger":
			d, err := time.ParseDuration(v)
			if err != nil {
				return Config{}, bad("%s=%q is not a duration such as 30s or 5ms", key, v)
			}
			if key == "linger" {
				cfg.Linger = d
			} else {
				cfg.ProduceTimeout = d
			}
		case "tls", "auto_create_topics":
			on, err := strconv.ParseBool(v)
			if err != nil {
				return Config{}, bad("%s=%q is not true or false", key, v)
			}
			if key == "tls" && on {
				cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
			} else if key == "auto_create_topics" {
				cfg.AllowAutoTopicCreation = on
			}
		default:
			return Config{}, bad("unknown option %q: use topic, client_id, max_message_bytes, produce_timeout, linger, tls or auto_create_topics", key)
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
