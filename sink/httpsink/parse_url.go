package httpsink

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/outbox/sink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// ParseURL reads the sink URL form
//
//	http(s)://[user:password@]host[:port]/path[?query][&option=value...]
//
// into a Config. These query parameters are options of the sink, removed
// from the target URL; any other parameter stays and is sent to the
// endpoint:
//
//	timeout=5s           Config.Timeout
//	concurrency=8        Config.Concurrency
//	sign_secret_env=NAME Config.SigningSecret is read from the environment
//	                     variable NAME, so the secret is never in the URL
//	deny_private=true    Config.DenyPrivate
//	allow_private=true   Config.AllowPrivate
//	format=cloudevents   Config.Format: native (the default), cloudevents
//	                     (binary mode) or cloudevents-structured
//	source=/outbox/pay   Config.Source, the CloudEvents source
//
// The returned Config has been validated; pass it to [New], after setting
// fields that have no URL form (Headers, Client). Errors match
// [outbox.ErrInvalidConfig] and never quote the URL's password, query or the
// signing secret.
func ParseURL(raw string) (Config, error) {
	return parseURL(raw, os.LookupEnv)
}

// parseURL is ParseURL with the environment as a parameter.
func parseURL(raw string, lookupEnv func(string) (string, bool)) (Config, error) {
	bad := func(format string, args ...any) error {
		return sink.Invalid(sinkName, "URL %s: "+format, append([]any{quoteURL(raw)}, args...)...)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, bad("is not a valid URL: %s", urlErrorReason(err, raw))
	}
	var cfg Config
	seen := make(map[string]bool)
	var kept []string
	for part := range strings.SplitSeq(u.RawQuery, "&") {
		if part == "" {
			continue
		}
		rawKey, rawValue, _ := strings.Cut(part, "=")
		key, err1 := url.QueryUnescape(rawKey)
		value, err2 := url.QueryUnescape(rawValue)
		if err1 != nil || !isOption(key) {
			kept = append(kept, part) // the endpoint's own parameter
			continue
		}
		if err2 != nil {
			return Config{}, bad("option %s has a value that is not valid URL escaping (%q): write %%25 for a literal %%", key, rawValue)
		}
		if seen[key] {
			return Config{}, bad("option %s is given twice: keep one", key)
		}
		seen[key] = true
		if err := cfg.setOption(key, value, lookupEnv); err != nil {
			return Config{}, bad("%w", err)
		}
	}
	u.RawQuery = strings.Join(kept, "&")
	u.ForceQuery = false
	cfg.URL = u.String()
	if _, err := cfg.withDefaults().validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func isOption(key string) bool {
	switch key {
	case "timeout", "concurrency", "sign_secret_env", "deny_private", "allow_private", "format", "source":
		return true
	}
	return false
}

// setOption applies one query option to c.
func (c *Config) setOption(key, value string, lookupEnv func(string) (string, bool)) error {
	switch key {
	case "timeout":
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 {
			return fmt.Errorf("timeout=%s is not a positive duration: write it like timeout=5s or timeout=1500ms", value)
		}
		c.Timeout = d
	case "concurrency":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > MaxConcurrency {
			return fmt.Errorf("concurrency=%s is not a number from 1 to %d", value, MaxConcurrency)
		}
		c.Concurrency = n
	case "sign_secret_env":
		if value == "" {
			return errors.New("sign_secret_env is empty: name the environment variable that holds the signing secret, e.g. sign_secret_env=WEBHOOK_SECRET")
		}
		secret, ok := lookupEnv(value)
		if !ok || secret == "" {
			return fmt.Errorf("sign_secret_env=%s: the environment variable %s is unset or empty: set it to the signing secret", value, value)
		}
		c.SigningSecret = secret
	case "format":
		c.Format = sinkkit.Format(value)
	case "source":
		c.Source = value
	case "deny_private", "allow_private":
		b, err := strconv.ParseBool(value)
		if err != nil {
			return fmt.Errorf("%s=%s is not a boolean: use true or false", key, value)
		}
		if key == "deny_private" {
			c.DenyPrivate = b
		} else {
			c.AllowPrivate = b
		}
	}
	return nil
}

// quoteURL returns raw as errors may quote it: the password masked, the
// query and fragment left out (they may carry tokens).
func quoteURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Opaque == "" {
		hadQuery := u.RawQuery != "" || u.ForceQuery
		u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
		s := u.Redacted()
		if hadQuery {
			s += "?..."
		}
		return s
	}
	// Unparsable, or opaque ("user:pass@host" parses as scheme "user"):
	// mask everything between the scheme and the last '@'.
	s := raw
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		start := 0
		if i := strings.Index(s, "//"); i >= 0 && i < at {
			start = i + 2
		} else if i := strings.IndexByte(s, ':'); i >= 0 && i < at {
			start = i + 1
		}
		s = s[:start] + "xxxxx" + s[at:]
	}
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i] + "?..."
	}
	return s
}

// urlErrorReason says why url.Parse failed without quoting credentials: the
// parser's message may quote any part of the URL, so a URL with an '@' gets
// a generic reason.
func urlErrorReason(err error, raw string) string {
	if strings.Contains(raw, "@") {
		return "check that the user name and password are percent-encoded (e.g. / as %2F, @ as %40)"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}
