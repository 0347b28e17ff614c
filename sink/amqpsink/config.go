package amqpsink

import (
	"crypto/tls"
	"log/slog"
	"strings"
	"time"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// Defaults for the zero values of [Config].
const (
	DefaultExchange       = "outbox"
	DefaultPublishTimeout = 10 * time.Second
	DefaultConnectTimeout = 5 * time.Second
	DefaultReconnectWait  = 500 * time.Millisecond
	// DefaultMaxMessageSize is RabbitMQ's default max_message_size.
	DefaultMaxMessageSize = 128 << 20
	DefaultConnectionName = "outbox-relay"
)

// Config configures a [Sink]. The zero value of every field except URL
// means the documented default.
type Config struct {
	// URL is the broker, amqp://user:password@host:5672/vhost (amqps:// for
	// TLS). The password is redacted in every error and log line.
	URL string

	// Exchange is the exchange every event is published to: a durable
	// topic exchange, declared if it does not exist. Default "outbox".
	Exchange string

	// Route is the routing key template: {aggregate_type}, {aggregate_id}
	// and {event_type} are replaced. Default "{aggregate_type}.events", so
	// payment events are published with routing key payment.events.
	Route string

	// RouteOverrides replaces Route for the aggregate types it names, e.g.
	// {"merchant": "merchant.audit"} (the CLI's --route).
	RouteOverrides map[string]string

	// PublishTimeout is how long one message waits for its publisher
	// confirm. Default 10s.
	PublishTimeout time.Duration

	// ConnectTimeout bounds each connection attempt: dialling, declaring
	// the exchange and opening the channel. Default 5s.
	ConnectTimeout time.Duration

	// ReconnectWait is the first pause between reconnection attempts; it
	// doubles up to 10 times as long while the broker stays away. The sink
	// reconnects forever. Default 500ms.
	ReconnectWait time.Duration

	// MaxMessageSize is the largest body the sink sends; a larger event
	// fails permanently without being sent. Set it to the broker's
	// max_message_size when that is lower than the default (RabbitMQ's
	// default, 128 MiB): the broker answers an oversized message by closing
	// the channel, which fails every unconfirmed message on it. If that
	// happens anyway, the sink lowers its limit to the one the broker names.
	MaxMessageSize int

	// ConnectionName is shown in the broker's connection list. Default
	// "outbox-relay".
	ConnectionName string

	// TLS configures amqps:// connections. Default: the system roots.
	TLS *tls.Config

	// Format is how an event is published: [sinkkit.FormatNative] (the
	// default), [sinkkit.FormatCloudEvents] (CloudEvents binary mode: the
	// attributes as cloudEvents:* headers, the payload as the body) or
	// [sinkkit.FormatCloudEventsStructured] (the CloudEvent in JSON as the
	// body, content-type application/cloudevents+json). The outbox
	// headers and properties are set in every format.
	Format sinkkit.Format

	// Source is the CloudEvents source attribute. Default
	// /outbox/outbox_events (the CLI uses /outbox/<table>).
	Source string

	// Logger receives connection events (lost, re-established). Default
	// slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Exchange == "" {
		c.Exchange = DefaultExchange
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.ReconnectWait == 0 {
		c.ReconnectWait = DefaultReconnectWait
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.ConnectionName == "" {
		c.ConnectionName = DefaultConnectionName
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// sinkName starts the sink's errors.
const sinkName = "amqp sink"

// validate checks c (after withDefaults) and returns its router.
func (c Config) validate() (*sink.Router, error) {
	if strings.TrimSpace(c.URL) == "" {
		return nil, sink.Invalid(sinkName, "no broker URL: use amqp://user:password@host:5672/vhost")
	}
	if c.PublishTimeout < 0 || c.ConnectTimeout < 0 || c.ReconnectWait < 0 {
		return nil, sink.Invalid(sinkName, "timeouts must not be negative")
	}
	if c.MaxMessageSize < 0 {
		return nil, sink.Invalid(sinkName, "MaxMessageSize must not be negative")
	}
	if len(c.Exchange) > 255 {
		return nil, sink.Invalid(sinkName, "exchange name of %d bytes: the limit is 255", len(c.Exchange))
	}
	if err := sinkkit.CheckFormat(sinkName, c.Format, c.Source, sinkkit.FormatCloudEvents, sinkkit.FormatCloudEventsStructured); err != nil {
		return nil, err
	}
	return sinkkit.NewCheckedRouter(sinkName, "routing key", c.Route, c.RouteOverrides, checkRoutingKey)
}
