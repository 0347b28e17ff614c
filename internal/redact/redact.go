// Package redact masks the secrets of sink URLs and DSNs for display: the
// password of a URL's user and the values of secret-bearing query options.
// The CLI (cmd/outbox) and the destinations file (internal/destconfig)
// print URLs through it, so that both mask the same things.
package redact

import (
	"net/url"
	"slices"
	"strings"
)

// Mask replaces a secret.
const Mask = "xxxxx"

// SecretKeys are the option names whose values are secrets, matched as
// whole names, case-insensitively. routing_key (a routing template),
// keyfile (a path) and sign_secret_env (the name of a variable) are not.
var SecretKeys = []string{
	"password", "passwd", "pwd", "pass", "secret", "sign_secret", "client_secret",
	"token", "access_token", "auth_token", "auth", "key", "api_key", "apikey", "private_key",
	"sasl_password",
}

// IsSecretKey reports whether the option k carries a secret.
func IsSecretKey(k string) bool {
	return slices.Contains(SecretKeys, strings.ToLower(k))
}

// URL returns raw with its password and secret query values replaced by
// [Mask], for display. A URL that does not parse is not shown at all.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	if u.User == nil && u.RawQuery == "" {
		return raw
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Mask)
		}
	}
	q := u.Query()
	changed := false
	for k := range q {
		if IsSecretKey(k) {
			q.Set(k, Mask)
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.String()
}
