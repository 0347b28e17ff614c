package natssink

import (
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// Defaults for the zero values of [Config].
const (
	DefaultStream         = "OUTBOX"
	DefaultStreamSubjects = "*.events"
	DefaultPublishTimeout = 10 * time.Second
	DefaultConnectTimeout = 5 * time.Second
	DefaultReconnectWait  = 250 * time.Millisecond
	DefaultClientName     = "outbox-relay"
)

// Config configures a [Sink]. The zero value of every field except URL
// means the documented default.
type Config struct {
	// URL is the NATS server, nats://[user:password@]host[:port], or a
	// comma-separated list of them. Credentials are redacted in every error.
	URL string

	// Route is the subject template: {aggregate_type}, {aggregate_id} and
	// {event_type} are replaced. Default "{aggregate_type}.events", so
	// payment events go to payment.events.
	Route string

	// RouteOverrides replaces Route for the aggregate types it names, e.g.
	// {"merchant": "merchant.audit"} (the CLI's --route).
	RouteOverrides map[string]string

	// Stream is the JetStream stream the sink creates when no stream
	// captures a subject it publishes to. Default "OUTBOX". A stream that
	// already captures the subject, whatever its name, is used as it is.
	Stream string

	// StreamSubjects are the subjects of the stream the sink creates.
	// Default ["*.events"]. A subject the sink publishes to that they do not
	// cover is added to them.
	StreamSubjects []string

	// NoCreateStream forbids creating or changing a stream: a message whose
	// subject no stream captures then fails permanently.
	NoCreateStream bool

	// PublishTimeout is how long one message waits for its PubAck.
	// Default 10s.
	PublishTimeout time.Duration

	// ConnectTimeout bounds each connection attempt and each JetStream
	// check after a connection is made. Default 5s.
	ConnectTimeout time.Duration

	// ReconnectWait is the pause between connection attempts, from the
	// first one (New does not wait for the server); the sink reconnects
	// forever. Default 250ms.
	ReconnectWait time.Duration

	// ReconnectBufSize is how many bytes published while disconnected are
	// buffered and sent once the connection is back. 0 means the nats.go
	// default (8 MiB); negative disables buffering, so a publish while
	// disconnected fails at once (retryably).
	ReconnectBufSize int

	// ClientName names the connection on the server. Default "outbox-relay".
	ClientName string

	// Options are extra nats.go connection options (TLS, credentials,
	// NKeys), applied after the sink's own.
	Options []nats.Option

	// Format is how an event is published: [sinkkit.FormatNative] (the
	// default), [sinkkit.FormatCloudEvents] (CloudEvents binary mode: ce-*
	// headers, the payload as the data) or
	// [sinkkit.FormatCloudEventsStructured] (the CloudEvent in JSON as the
	// data). The outbox headers and Nats-Msg-Id are set in every format.
	Format sinkkit.Format

	// Source is the CloudEvents source attribute. Default
	// /outbox/outbox_events (the CLI uses /outbox/<table>).
	Source string

	// Logger receives connection events (disconnected, reconnected,
	// stream created). Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if len(c.StreamSubjects) == 0 {
		c.StreamSubjects = []string{DefaultStreamSubjects}
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
	if c.ClientName == "" {
		c.ClientName = DefaultClientName
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// sinkName starts the sink's errors.
const sinkName = "nats sink"

// validate checks c (after withDefaults) and returns its router.
func (c Config) validate() (*sink.Router, error) {
	if strings.TrimSpace(c.URL) == "" {
		return nil, sink.Invalid(sinkName, "no server URL: use nats://host:4222")
	}
	if c.PublishTimeout < 0 || c.ConnectTimeout < 0 || c.ReconnectWait < 0 {
		return nil, sink.Invalid(sinkName, "timeouts must not be negative")
	}
	if !validStreamName(c.Stream) {
		return nil, sink.Invalid(sinkName, "stream name %q: use letters, digits, '-' and '_' only", c.Stream)
	}
	for _, s := range c.StreamSubjects {
		if err := checkStreamSubject(s); err != nil {
			return nil, sink.Invalid(sinkName, "stream subject %q: %v", s, err)
		}
	}
	if err := sinkkit.CheckFormat(sinkName, c.Format, c.Source, sinkkit.FormatCloudEvents, sinkkit.FormatCloudEventsStructured); err != nil {
		return nil, err
	}
	r, err := sinkkit.NewCheckedRouter(sinkName, "subject", c.Route, c.RouteOverrides, func(s string) string {
		if err := checkPublishSubject(s); err != nil {
			return err.Error()
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	// A template whose own text makes an invalid subject is refused now.
	if err := r.CheckRoutes(sinkName, checkPublishSubject); err != nil {
		return nil, err
	}
	return r, nil
}

func validStreamName(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}
