package httpsink

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/txoutbox/outbox/sink/sinktest"
)

// FuzzParseURL: see sinktest.CheckURL. An accepted URL keeps the
// endpoint's own query parameters and none of the sink's options, and the
// signing secret read from the environment never appears in an error.
func FuzzParseURL(f *testing.F) {
	const signingSecret = "Wk7-signing-secret"
	env := func(name string) (string, bool) {
		if name == "GW_SECRET" {
			return signingSecret, true
		}
		return "", false
	}
	sinktest.FuzzURLs(f, sinktest.URLParser{
		Sink: sinkName,
		Parse: func(raw string) (any, error) {
			cfg, err := parseURL(raw, env)
			if err != nil && strings.Contains(err.Error(), signingSecret) {
				return nil, fmt.Errorf("the error shows the signing secret: %v", err)
			}
			return cfg, err
		},
		Check: func(cfg any) error {
			c := cfg.(Config)
			if _, err := c.withDefaults().validate(); err != nil {
				return err
			}
			u, err := url.Parse(c.URL)
			if err != nil {
				return err
			}
			for part := range strings.SplitSeq(u.RawQuery, "&") {
				if key, err := url.QueryUnescape(strings.SplitN(part, "=", 2)[0]); err == nil && isOption(key) {
					return fmt.Errorf("the sink option %s stayed in the endpoint's URL %s", key, c.URL)
				}
			}
			return nil
		},
	}, "https://",
		"gateway.example/approve", "h:8443/x?timeout=5s&concurrency=8&sign_secret_env=GW_SECRET&deny_private=true&allow_private=true",
		"h/x?a=1&timeout=1s&b=%zz", "h/x?concurrency=0", "h/x?timeout=5s&timeout=6s", "h/x?sign_secret_env=UNSET", "h/x?allow_private=true",
		"/no-host", "[::1]:80/x#frag", "h/x?%zz=1&deny_private=maybe", "")
}
