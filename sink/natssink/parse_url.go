package natssink

import (
	"net/url"
	"strings"

	"github.com/txoutbox/outbox/sink/sinkkit"
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
//	format=NAME             Config.Format: native (the default), cloudevents
//	                        or cloudevents-structured
//	source=URI              Config.Source, the CloudEvents source
//
// The returned Config has been validated. Errors match
// [outbox.ErrInvalidConfig] and never quote the URL's password.
func ParseURL(raw string) (Config, error) {
	q := sinkkit.NewURLOptions(sinkName, raw)
	servers, query, _ := strings.Cut(raw, "?")
	var urls []string
	scheme := ""
	for i, entry := range strings.Split(servers, ",") {
		entry = strings.TrimSpace(entry)
		if i > 0 && !strings.Contains(entry, "://") {
			entry = scheme + "://" + entry
		}
		u, err := url.Parse(entry)
		if err != nil {
			return Config{}, q.Errorf("server %d is not a valid URL", i+1)
		}
		switch u.Scheme {
		case "nats", "tls":
		default:
			return Config{}, q.Errorf("scheme %q: use nats:// (or tls://)", u.Scheme)
		}
		if scheme == "" {
			scheme = u.Scheme
		}
		if u.Hostname() == "" {
			return Config{}, q.Errorf("no host: use nats://host:4222")
		}
		if u.Path != "" && u.Path != "/" {
			return Config{}, q.Errorf("a NATS URL has no path; put the subject in ?subject=")
		}
		urls = append(urls, entry)
	}
	cfg := Config{URL: strings.Join(urls, ",")}
	q.Parse(query)
	q.String("subject", &cfg.Route)
	q.String("stream", &cfg.Stream)
	var subjects string
	if q.String("stream_subjects", &subjects) {
		for s := range strings.SplitSeq(subjects, ",") {
			if s = strings.TrimSpace(s); s != "" {
				cfg.StreamSubjects = append(cfg.StreamSubjects, s)
			}
		}
	}
	var create bool
	if q.Bool("create_stream", &create) {
		cfg.NoCreateStream = !create
	}
	q.PositiveDuration("publish_timeout", &cfg.PublishTimeout)
	q.PositiveDuration("connect_timeout", &cfg.ConnectTimeout)
	q.PositiveDuration("reconnect_wait", &cfg.ReconnectWait)
	q.Int("reconnect_buffer", &cfg.ReconnectBufSize)
	q.String("name", &cfg.ClientName)
	var format string
	if q.String("format", &format) {
		cfg.Format = sinkkit.Format(format)
	}
	q.String("source", &cfg.Source)
	if err := q.Err(); err != nil {
		return Config{}, err
	}
	if _, err := cfg.withDefaults().validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
