package httpsink

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// Defaults for the zero values of [Config].
const (
	DefaultTimeout     = 10 * time.Second
	DefaultConcurrency = 16
	DefaultUserAgent   = "outbox-relay"

	// MaxConcurrency bounds Config.Concurrency.
	MaxConcurrency = 1024
)

// Config configures a [Sink]. The zero value of every field except URL
// means the documented default.
type Config struct {
	// URL is the endpoint every event is POSTed to: http:// or https://,
	// with a host. Credentials in its userinfo are sent as basic
	// authentication and are redacted in every error.
	URL string

	// Timeout bounds one request, from sending to reading the response
	// status (and a bounded part of its body). Default 10s. An event's
	// Deadline shortens it further.
	Timeout time.Duration

	// Concurrency is the most requests in flight at once, shared by all
	// concurrent Publish calls. Default 16, at most 1024.
	Concurrency int

	// Client sends the requests. Default: a client of the sink's own that
	// does not follow redirects (a 3xx response is a permanent failure),
	// uses the proxy from the environment unless DenyPrivate is set, and
	// keeps up to Concurrency idle connections to the host. A Client given
	// here is used as is (its redirect policy included) and Close leaves its
	// connections alone; it cannot be combined with DenyPrivate.
	Client *http.Client

	// Headers are static headers added to every request, e.g.
	// Authorization. Their values are treated as secrets: they are never
	// put into errors, and are scrubbed from the response excerpts that
	// errors quote. They cannot replace the headers the sink sets itself
	// (Content-Type, Idempotency-Key, Outbox-*, webhook-*).
	Headers map[string]string

	// UserAgent is the User-Agent header. Default "outbox-relay".
	UserAgent string

	// SigningSecret, when set, signs every request the Standard Webhooks
	// way: headers webhook-id (the event id), webhook-timestamp (Unix
	// seconds) and webhook-signature ("v1," + base64 of the HMAC-SHA256 of
	// "id.timestamp.body"), as the Standard Webhooks libraries verify
	// it. The secret is base64 of the key, with or without the "whsec_"
	// prefix, and is decoded; a secret that is not base64 is refused.
	SigningSecret string

	// DenyPrivate protects against server-side request forgery: every
	// address the host name resolves to is checked when the connection is
	// made, and loopback, private (RFC 1918, fc00::/7), link-local,
	// unspecified and cloud metadata addresses (169.254.169.254 and
	// others) are refused with a permanent error. The environment's proxy
	// is not used, so the check sees the real destination.
	DenyPrivate bool

	// Format is how an event is sent: [sinkkit.FormatNative] (the default:
	// the payload as the body), [sinkkit.FormatCloudEvents] (CloudEvents
	// binary mode: ce-* headers, the payload as the body) or
	// [sinkkit.FormatCloudEventsStructured] (the CloudEvent as a JSON body,
	// Content-Type application/cloudevents+json). The Outbox-* and
	// Idempotency-Key headers are sent in every format.
	Format sinkkit.Format

	// Source is the CloudEvents source attribute. Default
	// /outbox/outbox_events (the CLI uses /outbox/<table>).
	Source string

	// AllowPrivate relaxes DenyPrivate for loopback and private addresses,
	// for receivers inside the same network. Link-local, unspecified and
	// metadata addresses stay refused. It requires DenyPrivate.
	AllowPrivate bool
}

// withDefaults returns c with its zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.UserAgent == "" {
		c.UserAgent = DefaultUserAgent
	}
	return c
}

// validate checks c (after withDefaults) and returns the parsed URL.
func (c Config) validate() (*url.URL, error) {
	bad := func(format string, args ...any) error {
		return sink.Invalid(sinkName, format, args...)
	}
	if c.URL == "" {
		return nil, bad("URL is required: set it to the http:// or https:// endpoint that receives the events")
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, bad("URL %s is not a valid URL: %s", quoteURL(c.URL), urlErrorReason(err, c.URL))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, bad("URL %s has scheme %q: use http or https", quoteURL(c.URL), u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, bad("URL %s has no host: write it as %s://host/path", quoteURL(c.URL), u.Scheme)
	}
	switch {
	case c.Timeout < 0:
		return nil, bad("timeout %s is negative: use a positive duration, or 0 for the default %s", c.Timeout, DefaultTimeout)
	case c.Concurrency < 0 || c.Concurrency > MaxConcurrency:
		return nil, bad("concurrency %d is out of range: use 1 to %d, or 0 for the default %d", c.Concurrency, MaxConcurrency, DefaultConcurrency)
	case c.AllowPrivate && !c.DenyPrivate:
		return nil, bad("AllowPrivate (allow_private) only relaxes DenyPrivate (deny_private): set DenyPrivate too, or neither")
	case c.DenyPrivate && c.Client != nil:
		return nil, bad("DenyPrivate needs the sink's own client: leave Client nil, or guard the addresses in your client's dialer")
	case !validHeaderValue(c.UserAgent):
		return nil, bad("UserAgent contains a control character or invalid UTF-8")
	}
	for k, v := range c.Headers {
		// Values are secrets: errors name the header, never its value.
		if !validHeaderName(k) {
			return nil, bad("header name %q is not a valid HTTP header name (use letters, digits and - _ .)", k)
		}
		if http.CanonicalHeaderKey(k) == "User-Agent" {
			return nil, bad("header User-Agent cannot be set in Headers: use Config.UserAgent")
		}
		if isReservedHeader(k) {
			return nil, bad("header %q is set by the sink itself and cannot be configured: remove it from Headers", http.CanonicalHeaderKey(k))
		}
		if !validHeaderValue(v) {
			return nil, bad("the value of header %q contains a control character or invalid UTF-8", k)
		}
	}
	if err := sinkkit.CheckFormat(sinkName, c.Format, c.Source, sinkkit.FormatCloudEvents, sinkkit.FormatCloudEventsStructured); err != nil {
		return nil, err
	}
	if _, err := signingKey(c.SigningSecret); err != nil {
		return nil, bad("%s", err)
	}
	return u, nil
}

// signingKey returns the HMAC key of a Standard Webhooks secret, or nil when
// there is no secret. Errors never quote the secret.
func signingKey(secret string) ([]byte, error) {
	if secret == "" {
		return nil, nil
	}
	rest, prefixed := strings.CutPrefix(secret, "whsec_")
	key, err := base64.StdEncoding.DecodeString(rest)
	switch {
	case err != nil && prefixed:
		return nil, fmt.Errorf("signing secret starts with whsec_ but the rest is not standard base64: copy the whole secret from the receiver's settings")
	case err != nil:
		return nil, fmt.Errorf("signing secret is not base64: Standard Webhooks secrets are whsec_ followed by the base64 of the key, or the base64 alone; copy the whole secret from the receiver's settings")
	case len(key) == 0:
		return nil, fmt.Errorf("signing secret has an empty key: copy the whole secret from the receiver's settings")
	}
	return key, nil
}
