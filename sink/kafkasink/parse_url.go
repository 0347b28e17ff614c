package kafkasink

import (
	"crypto/tls"
	"strings"

	"github.com/txoutbox/outbox/sink/sinkkit"
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
//	format=NAME             Config.Format: native (the default), cloudevents,
//	                        cloudevents-structured or debezium
//	source=URI              Config.Source, the CloudEvents source
//
// A port left out is 9092. Per-aggregate-type routes have no URL form: set
// Config.RouteOverrides (the CLI's --route flag). The returned Config has
// been validated. Errors match [outbox.ErrInvalidConfig].
func ParseURL(raw string) (Config, error) {
	q := sinkkit.NewURLOptions(sinkName, raw)
	rest, ok := strings.CutPrefix(raw, "kafka://")
	if !ok {
		if i := strings.Index(raw, "://"); i > 0 && strings.EqualFold(raw[:i], "kafka") {
			rest, ok = raw[i+3:], true
		}
	}
	if !ok {
		return Config{}, q.Errorf("use the form kafka://host:9092[,host2:9092]?topic={aggregate_type}.events")
	}
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		rest = rest[:i]
	}
	authority, query, _ := strings.Cut(rest, "?")
	if path := strings.IndexByte(authority, '/'); path >= 0 {
		if strings.Trim(authority[path:], "/") != "" {
			return Config{}, q.Errorf("has a path; a Kafka URL names brokers only: put the topic in ?topic=")
		}
		authority = authority[:path]
	}
	if strings.Contains(authority, "@") {
		return Config{}, q.Errorf("has credentials; SASL is not supported by the kafka sink yet: remove user:password@")
	}
	var cfg Config
	for b := range strings.SplitSeq(authority, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	if len(cfg.Brokers) == 0 {
		return Config{}, q.Errorf("names no broker: use kafka://host:9092")
	}
	q.Parse(query)
	q.String("topic", &cfg.Route)
	q.String("client_id", &cfg.ClientID)
	q.Int("max_message_bytes", &cfg.MaxMessageBytes)
	q.Duration("produce_timeout", &cfg.ProduceTimeout)
	q.Duration("linger", &cfg.Linger)
	var useTLS bool
	if q.Bool("tls", &useTLS) && useTLS {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	q.Bool("auto_create_topics", &cfg.AllowAutoTopicCreation)
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
