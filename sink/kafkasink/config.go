package kafkasink

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// Defaults for the zero values of [Config].
const (
	// DefaultMaxMessageBytes is franz-go's default record batch limit,
	// the historical default of Kafka's max.message.bytes. Kafka 2.x and
	// later default to 1048588 per topic; raise MaxMessageBytes to the
	// topics' real limit to send larger events.
	DefaultMaxMessageBytes = 1_000_012
	// DefaultProduceTimeout bounds one Publish call.
	DefaultProduceTimeout = 30 * time.Second
	// DefaultClientID names the producer in the brokers' logs and quotas.
	DefaultClientID = "outbox-relay"
	// DefaultPort is used for a broker address given without a port.
	DefaultPort = "9092"

	// DebeziumRoute is the default topic template of FormatDebezium, the
	// topic Debezium's outbox event router writes to.
	DebeziumRoute = "outbox.event.{aggregate_type}"

	// MinMaxMessageBytes and MaxMaxMessageBytes bound MaxMessageBytes (the
	// range franz-go accepts for a record batch).
	MinMaxMessageBytes = 512
	MaxMaxMessageBytes = 1 << 30
)

// Config configures a [Sink]. The zero value of every field except Brokers
// means the documented default.
type Config struct {
	// Brokers are the seed brokers, host:port (the port defaults to 9092).
	// The client discovers the rest of the cluster from them.
	Brokers []string

	// Route is the topic template: {aggregate_type}, {aggregate_id} and
	// {event_type} are replaced by the event's values. Default
	// "{aggregate_type}.events": payment events go to payment.events.
	Route string

	// RouteOverrides replaces Route for some aggregate types, e.g.
	// {"merchant": "merchant.audit"} (the CLI's --route flag).
	RouteOverrides map[string]string

	// ClientID names the producer to the brokers. Default "outbox-relay".
	ClientID string

	// MaxMessageBytes is the largest record batch the producer builds, in
	// bytes before compression: Kafka's max.message.bytes. An event whose
	// record alone (key, payload, headers and batch overhead) is larger
	// fails at once with a permanent error, without being sent. Keep it at
	// or below the topics' max.message.bytes (and the brokers'
	// message.max.bytes): a batch the broker refuses as too large is resent
	// one record at a time to find the oversized event, which is slow.
	// Default 1000012, from 512 to 1 GiB.
	MaxMessageBytes int

	// ProduceTimeout bounds one Publish call: a message the brokers have
	// not acknowledged by then fails with a retryable error (it may still
	// be written later, so the relay's retry can duplicate it). Default 30s.
	ProduceTimeout time.Duration

	// Linger is how long the producer waits for more records before it
	// sends a partition's batch. Default 0: send at once, and batch what
	// arrives while a request is in flight, which suits the relay since
	// every Publish call waits for its acknowledgements.
	Linger time.Duration

	// TLS, when set, connects to the brokers over TLS with this
	// configuration. Nil: plain TCP.
	TLS *tls.Config

	// Format is how an event is written: [sinkkit.FormatNative] (the
	// default), [sinkkit.FormatCloudEvents] (CloudEvents binary mode: ce_*
	// headers), [sinkkit.FormatCloudEventsStructured] (the CloudEvent in JSON
	// as the value) or [sinkkit.FormatDebezium] (the records of Debezium's
	// outbox event router: header id = the event id; the default Route
	// becomes outbox.event.{aggregate_type}). See the package docs.
	Format sinkkit.Format

	// Source is the CloudEvents source attribute. Default
	// /outbox/outbox_events (the CLI uses /outbox/<table>).
	Source string

	// Logger receives connection events: the brokers unreachable (WARN,
	// retried in the background) and reached. Default slog.Default().
	Logger *slog.Logger

	// AllowAutoTopicCreation asks the brokers to create a topic that does
	// not exist when the producer first needs it (the broker must allow it
	// too: auto.create.topics.enable). Default false: a missing topic is a
	// permanent error, so a typo in a route never creates a stray topic.
	AllowAutoTopicCreation bool
}

// withDefaults returns c with its zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.Route == "" {
		c.Route = sink.DefaultRoute
		if c.Format == sinkkit.FormatDebezium {
			c.Route = DebeziumRoute
		}
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.ProduceTimeout == 0 {
		c.ProduceTimeout = DefaultProduceTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	brokers := make([]string, 0, len(c.Brokers))
	for _, b := range c.Brokers {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		brokers = append(brokers, withPort(b))
	}
	c.Brokers = brokers
	return c
}

// withPort adds the default port to a broker address that has none.
func withPort(b string) string {
	if _, _, err := net.SplitHostPort(b); err == nil {
		return b
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(b, "["), "]"), DefaultPort)
}

// sinkName starts the sink's errors.
const sinkName = "kafka sink"

func invalid(format string, args ...any) error { return sink.Invalid(sinkName, format, args...) }

// validate checks c (after withDefaults) and returns its router.
func (c Config) validate() (*sink.Router, error) {
	if len(c.Brokers) == 0 {
		return nil, invalid("no brokers: set Brokers to at least one host:port, e.g. 127.0.0.1:9092")
	}
	for _, b := range c.Brokers {
		host, port, err := net.SplitHostPort(b)
		if err != nil || host == "" || port == "" {
			return nil, invalid("broker address %q is not host:port", b)
		}
	}
	switch {
	case c.MaxMessageBytes < MinMaxMessageBytes || c.MaxMessageBytes > MaxMaxMessageBytes:
		return nil, invalid("MaxMessageBytes %d is out of range: use %d to %d, or 0 for the default %d",
			c.MaxMessageBytes, MinMaxMessageBytes, MaxMaxMessageBytes, DefaultMaxMessageBytes)
	case c.ProduceTimeout < 0:
		return nil, invalid("ProduceTimeout %s is negative: use a positive duration, or 0 for the default %s", c.ProduceTimeout, DefaultProduceTimeout)
	case c.Linger < 0:
		return nil, invalid("Linger %s is negative: use 0 (send at once) or a positive duration", c.Linger)
	case strings.ContainsFunc(c.ClientID, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return nil, invalid("ClientID contains a control character")
	}
	if err := sinkkit.CheckFormat(sinkName, c.Format, c.Source, sinkkit.FormatCloudEvents, sinkkit.FormatCloudEventsStructured, sinkkit.FormatDebezium); err != nil {
		return nil, err
	}
	r, err := sinkkit.NewCheckedRouter(sinkName, "topic", c.Route, c.RouteOverrides, func(t string) string {
		if err := checkTopic(t); err != nil {
			return err.Error()
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	// A template whose own text makes an invalid topic is refused now.
	if err := r.CheckRoutes(sinkName, checkTopic); err != nil {
		return nil, err
	}
	return r, nil
}

// checkTopic applies Kafka's rules for topic names: 1 to 249 characters
// of ASCII letters, digits, '.', '_' and '-', and not "." or "..".
func checkTopic(t string) error {
	if t == "" {
		return fmt.Errorf("it is empty")
	}
	if len(t) > 249 {
		return fmt.Errorf("it is %d characters long; Kafka allows at most 249", len(t))
	}
	if t == "." || t == ".." {
		return fmt.Errorf("Kafka does not allow the topic names \".\" and \"..\"")
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("it has the character %q; Kafka allows only ASCII letters, digits, '.', '_' and '-'", c)
		}
	}
	return nil
}
