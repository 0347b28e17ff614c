package natssink

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
//	nats://[user:password@]host[:port][,host2[:port]...][?option=value&...]
//
// (tls:// instead of nats:// asks for TLS) into a Config. The options:
//
//	subject=TEMPLATE        Config.Route, e.g. {aggregate_type}.events
//	stream=NAME             Config.Stream (default OUTBOX)
//	stream_subjects=A,B     Config.StreamSubjects (default *.events)
//	create_stream=false     Config.NoCreateStream = true
//	publish_timeout=10s     Config.PublishTimeout
//	connect_timeout=5s      Config.ConnectTimeout
//	reconnect_wait=250ms    Config.ReconnectWait
//	reconnect_buffer=BYTES  Config.ReconnectBufSize (-1 disables it)
//	name=NAME               Config.ClientName
//
// The returned Config has been validated. Errors match
// [outbox.ErrInvalidConfig] and never quote the URL's password.
func ParseURL(raw string) (Config, error) {
	servers, query, _ := strings.Cut(raw, "?")
	shown := redactServers(servers)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: nats sink: URL %s: "+format, append([]any{outbox.ErrInvalidConfig, shown}, args...)...)
	}
	var urls []string
	scheme := ""
	for i, entry := range strings.Split(servers, ",") {
		entry = strings.TrimSpace(entry)
		if i > 0 && !strings.Contains(entry, "://") {
			entry = scheme + "://" + entry
		}
		u, err := url.Parse(entry)
		if err != nil {
			return Config{}, bad("server %d is not a valid URL", i+1)
		}
		switch u.Scheme {
		case "nats", "tls":
		default:
			return Config{}, bad("scheme %q: use nats:// (or tls://)", u.Scheme)
		}
		if scheme == "" {
			scheme = u.Scheme
		}
		if u.Hostname() == "" {
			return Config{}, bad("no host: use nats://host:4222")
		}
		if u.Path != "" && u.Path != "/" {
			return Config{}, bad("a NATS URL has no path; put the subject in ?subject=")
		}
		urls = append(urls, entry)
	}
	cfg := Config{URL: strings.Join(urls, ",")}
	values, err := url.ParseQuery(query)
	if err != nil {
		return Config{}, bad("the query is not valid: %v", err)
	}
	for key, vs := range values {
		if len(vs) != 1 {
			return Config{}, bad("option %s is given %d times: keep one", key, len(vs))
		}
		v := vs[0]
		var err error
		switch key {
		case "subject":
			cfg.Route = v
		case "stream":
			cfg.Stream = v
		case "stream_subjects":
			for s := range strings.SplitSeq(v, ",") {
				if s = strings.TrimSpace(s); s != "" {
					cfg.StreamSubjects = append(cfg.StreamSubjects, s)
				}
			}
		case "create_stream":
			var b bool
			b, err = strconv.ParseBool(v)
			cfg.NoCreateStream = !b
		case "publish_timeout":
			cfg.PublishTimeout, err = parsePositiveDuration(v)
		case "connect_timeout":
			cfg.ConnectTimeout, err = parsePositiveDuration(v)
		case "reconnect_wait":
			cfg.ReconnectWait, err = parsePositiveDuration(v)
		case "reconnect_buffer":
			cfg.ReconnectBufSize, err = strconv.Atoi(v)
		case "name":
			cfg.ClientName = v
		default:
			return Config{}, bad("unknown option %q: use subject, stream, stream_subjects, create_stream, publish_timeout, connect_timeout, reconnect_wait, reconnect_buffer or name", key)
		}
		if err != nil {
			return Config{}, bad("option %s=%q: %v", key, v, err)
		}
	}
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

// redactServers returns a server list with every password replaced.
func redactServers(servers string) string {
	parts := strings.Split(servers, ",")
	for i, p := range parts {
		scheme, rest, ok := strings.Cut(p, "://")
		if !ok {
			continue
		}
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			continue
		}
		cred := rest[:at]
		if user, _, hasPass := strings.Cut(cred, ":"); hasPass {
			cred = user + ":xxxxx"
		} else if strings.HasPrefix(scheme, "nats") || scheme == "tls" {
			cred = "xxxxx" // a lone token
		}
		parts[i] = scheme + "://" + cred + rest[at:]
	}
	return strings.Join(parts, ",")
}
