package redissink

import (
	"crypto/tls"
	"log/slog"
	"net"
	"time"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// Defaults for the zero values of [Config].
const (
	// DefaultTimeout bounds one Publish call.
	DefaultTimeout = 10 * time.Second
	// DefaultDialTimeout bounds opening a connection.
	DefaultDialTimeout = 5 * time.Second
	// DefaultPort is used for an address given without a port.
	DefaultPort = "6379"
	// DefaultClientName is the connection name the server shows in
	// CLIENT LIST.
	DefaultClientName = "outbox-relay"
)

// Config configures a [Sink]. The zero value of every field except Addr
// means the documented default.
type Config struct {
	// Addr is the server, host:port (the port defaults to 6379).
	Addr string

	// Username and Password authenticate the connection (AUTH); both
	// empty: no authentication. They never appear in errors.
	Username string
	Password string

	// DB is the logical database to SELECT. Default 0.
	DB int

	// Route is the stream-name template: {aggregate_type}, {aggregate_id}
	// and {event_type} are replaced by the event's values. Default
	// "{aggregate_type}.events": payment events go to stream payment.events.
	Route string

	// RouteOverrides replaces Route for some aggregate types, e.g.
	// {"merchant": "merchant.audit"} (the CLI's --route flag).
	RouteOverrides map[string]string

	// MaxLen, when positive, caps every stream at about MaxLen entries
	// (XADD MAXLEN ~ MaxLen): Redis drops the oldest entries whether or not
	// a consumer has read them, so size it well above the consumers' lag.
	// Default 0: streams are never trimmed by the sink.
	MaxLen int64

	// Timeout bounds one Publish call: the pipeline of XADDs, from taking
	// a connection to reading the last reply. Default 10s.
	Timeout time.Duration

	// DialTimeout bounds opening a connection. Default 5s.
	DialTimeout time.Duration

	// TLS, when set, connects over TLS with this configuration (the
	// rediss:// URL form sets it). Nil: plain TCP.
	TLS *tls.Config

	// ClientName names the connections (CLIENT SETNAME). Default
	// "outbox-relay".
	ClientName string

	// Logger receives connection events: the server unreachable (WARN,
	// retried in the background) and reached. Default slog.Default().
	Logger *slog.Logger
}

// MaxStreamKeyBytes bounds a stream key that routing computes. Redis
// takes keys up to 512 MB; a key this long is a routing mistake.
const MaxStreamKeyBytes = 1024

// checkStream returns why key cannot be a stream the sink appends to, or
// "": non-empty, at most MaxStreamKeyBytes, valid UTF-8 without control
// characters.
func checkStream(key string) string { return sinkkit.CheckName(key, MaxStreamKeyBytes) }

// sinkName starts the sink's errors.
const sinkName = "redis sink"

func invalid(format string, args ...any) error { return sink.Invalid(sinkName, format, args...) }

// withDefaults returns c with its zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.Route == "" {
		c.Route = sink.DefaultRoute
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.ClientName == "" {
		c.ClientName = DefaultClientName
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			c.Addr = net.JoinHostPort(trimBrackets(c.Addr), DefaultPort)
		}
	}
	return c
}

func trimBrackets(h string) string {
	if len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']' {
		return h[1 : len(h)-1]
	}
	return h
}

// validate checks c (after withDefaults) and returns its router.
func (c Config) validate() (*sink.Router, error) {
	if c.Addr == "" {
		return nil, invalid("no address: set Addr to the server's host:port, e.g. 127.0.0.1:6379")
	}
	if host, port, err := net.SplitHostPort(c.Addr); err != nil || host == "" || port == "" {
		return nil, invalid("address %q is not host:port", c.Addr)
	}
	switch {
	case c.DB < 0:
		return nil, invalid("DB %d is negative: use 0 or more", c.DB)
	case c.MaxLen < 0:
		return nil, invalid("MaxLen %d is negative: use 0 (no trimming) or a positive number of entries", c.MaxLen)
	case c.Timeout < 0:
		return nil, invalid("Timeout %s is negative: use a positive duration, or 0 for the default %s", c.Timeout, DefaultTimeout)
	case c.DialTimeout < 0:
		return nil, invalid("DialTimeout %s is negative: use a positive duration, or 0 for the default %s", c.DialTimeout, DefaultDialTimeout)
	}
	return sinkkit.NewCheckedRouter(sinkName, "stream key", c.Route, c.RouteOverrides, checkStream)
}
