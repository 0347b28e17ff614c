package destconfig

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/internal/redact"
	"github.com/txoutbox/outbox/sink/amqpsink"
	"github.com/txoutbox/outbox/sink/httpsink"
	"github.com/txoutbox/outbox/sink/kafkasink"
	"github.com/txoutbox/outbox/sink/natssink"
	"github.com/txoutbox/outbox/sink/redissink"
	"github.com/txoutbox/outbox/sink/sinkkit"
)

// urlCheckers check a sink URL of each scheme with the parser `outbox
// relay --sink` opens it with (cmd/outbox/sinks.go), which validates it
// without connecting. stdout:// and discard:// take no options, and
// --sink reads nothing of them but the scheme.
var urlCheckers = map[string]func(raw string) error{
	"http":    parsedBy(httpsink.ParseURL),
	"https":   parsedBy(httpsink.ParseURL),
	"kafka":   parsedBy(kafkasink.ParseURL),
	"nats":    parsedBy(natssink.ParseURL),
	"amqp":    parsedBy(amqpsink.ParseURL),
	"amqps":   parsedBy(amqpsink.ParseURL),
	"redis":   parsedBy(redissink.ParseURL),
	"rediss":  parsedBy(redissink.ParseURL),
	"stdout":  func(string) error { return nil },
	"discard": func(string) error { return nil },
}

func parsedBy[C any](parse func(string) (C, error)) func(string) error {
	return func(raw string) error {
		_, err := parse(raw)
		return err
	}
}

// Schemes returns the URL schemes a destination may use, sorted.
func Schemes() []string {
	s := make([]string, 0, len(urlCheckers))
	for k := range urlCheckers {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

func schemeForms() string {
	s := Schemes()
	for i := range s {
		s[i] += "://"
	}
	return strings.Join(s, ", ")
}

// checkURL checks a destination's URL as --sink would before opening it:
// the limit options (rate=, burst=, max_in_flight=, min_time_left=)
// first, then the sink's own parser. The error never quotes a secret of
// the URL.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a valid URL: percent-encode the special characters of a password (@ as %%40, / as %%2F) and use one of %s", schemeForms())
	}
	if u.Scheme == "" {
		return fmt.Errorf("%s has no scheme: use one of %s", quote(redact.URL(raw)), schemeForms())
	}
	check, ok := urlCheckers[strings.ToLower(u.Scheme)]
	if !ok {
		return fmt.Errorf("the scheme %s is not supported: use one of %s", quote(u.Scheme), schemeForms())
	}
	rest, _, err := sinkkit.CutLimits(raw)
	if err == nil {
		err = check(rest)
	}
	if err == nil {
		return nil
	}
	msg := strings.TrimPrefix(err.Error(), outbox.ErrInvalidConfig.Error()+": ")
	return errors.New(scrub(msg, urlSecrets(raw)))
}

// urlSecrets returns the secrets of a URL as written: the password of its
// user, the values of its secret options and the value of the variable
// sign_secret_env= names.
func urlSecrets(raw string) []string {
	var out []string
	add := func(s string) {
		for _, v := range []string{s, url.QueryEscape(s), url.PathEscape(s)} {
			if len(v) >= 3 && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	if pw, ok := u.User.Password(); ok {
		add(pw)
	}
	for k, vs := range u.Query() {
		for _, v := range vs {
			switch {
			case redact.IsSecretKey(k):
				add(v)
			case k == "sign_secret_env":
				add(os.Getenv(v))
			}
		}
	}
	// Longest first, so that a secret containing another is masked whole.
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// scrub masks every secret in msg.
func scrub(msg string, secrets []string) string {
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, redact.Mask)
	}
	return msg
}
