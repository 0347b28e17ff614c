package main

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// secrets removes secrets from what the CLI prints, where they stand as
// secrets: the password of a URL's user (scheme://user:SECRET@host), the
// password of go-sql-driver/mysql's own DSN form (user:SECRET@tcp(...)),
// and the value of a secret-bearing option (password=SECRET, ?token=SECRET,
// sign_secret=SECRET). The same text elsewhere is left alone: with the
// password "postgres", "backend=postgres" is still printed as it is.
//
// Besides these patterns, which need no knowledge of the secret, it keeps
// the passwords of the DSN and sink URL it was given, so that a password
// with characters the patterns stop at (a raw '@' or '/') is still
// masked wherever it follows "user:" and precedes '@'.
type secrets struct{ values []string }

// mask replaces a secret.
const mask = "xxxxx"

// secretKeys are the option names whose values are secrets, matched as
// whole names, case-insensitively. routing_key (a routing template),
// keyfile (a path) and sign_secret_env (the name of a variable) are not.
var secretKeys = []string{
	"password", "passwd", "pwd", "pass", "secret", "sign_secret", "client_secret",
	"token", "access_token", "auth_token", "auth", "key", "api_key", "apikey", "private_key",
	"sasl_password",
}

var (
	// userinfoPassword: scheme://user:SECRET@ (SECRET without '@', '/' or space).
	userinfoPassword = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@]*:)[^\s@/]*@`)
	// optionSecret: key=SECRET, key = 'SECRET', key="SECRET" for a secret key.
	optionSecret = regexp.MustCompile(`(?i)\b(` + strings.Join(secretKeys, "|") + `)(\s*=\s*)('[^']*'|"[^"]*"|[^\s&'"]+)`)
	// driverDSN is go-sql-driver/mysql's own form: user:SECRET@tcp(host:port)/db.
	driverDSN         = regexp.MustCompile(`^[^:@/]*:(.*)@(?:tcp|unix)\(`)
	driverDSNPassword = regexp.MustCompile(`([\w.\-]*:)[^\s]*@((?:tcp|unix)\()`)
	// kvPassword finds the password of a key=value DSN, to record it.
	kvPassword = regexp.MustCompile(`(?i)\bpassword\s*=\s*('[^']*'|\S+)`)
)

// addURL records the password and secret query values of a URL or
// key=value DSN.
func (s *secrets) addURL(raw string) {
	if raw == "" {
		return
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			s.add(p)
			s.add(url.QueryEscape(p))
			s.add(url.PathEscape(p))
		}
	}
	// As the URL writes it: between "://user:" and the '@' before the
	// host; and, for a password with a raw '@', '/' or '#' (which a URL
	// parser reads as something else), up to the last '@'.
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		auth := rest
		if end := strings.IndexAny(rest, "/?#"); end >= 0 {
			auth = rest[:end]
		}
		for _, r := range []string{auth, rest} {
			if at := strings.LastIndexByte(r, '@'); at >= 0 {
				if _, pw, ok := strings.Cut(r[:at], ":"); ok {
					s.add(pw)
				}
			}
		}
	}
	if m := driverDSN.FindStringSubmatch(raw); m != nil {
		s.add(m[1])
	}
	for _, m := range kvPassword.FindAllStringSubmatch(raw, -1) {
		s.add(strings.Trim(m[1], "'"))
	}
}

// isSecretKey reports whether the option k carries a secret.
func isSecretKey(k string) bool {
	return slices.Contains(secretKeys, strings.ToLower(k))
}

func (s *secrets) add(v string) {
	if len(v) >= 3 && !slices.Contains(s.values, v) {
		s.values = append(s.values, v)
		// Longest first, so that a password containing another is masked whole.
		slices.SortStableFunc(s.values, func(a, b string) int { return len(b) - len(a) })
	}
}

// redact masks every secret of text where it stands as a secret.
func (s *secrets) redact(text string) string {
	for _, v := range s.values {
		text = strings.ReplaceAll(text, ":"+v+"@", ":"+mask+"@")
	}
	text = userinfoPassword.ReplaceAllString(text, "${1}"+mask+"@")
	text = optionSecret.ReplaceAllString(text, "${1}${2}"+mask)
	return driverDSNPassword.ReplaceAllString(text, "${1}"+mask+"@${2}")
}

// redactURL returns raw with its password and secret query values
// replaced, for display.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	if u.User == nil && u.RawQuery == "" {
		return raw
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), mask)
		}
	}
	q := u.Query()
	changed := false
	for k := range q {
		if isSecretKey(k) {
			q.Set(k, mask)
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.String()
}
