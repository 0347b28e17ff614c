package main

import (
	"net/url"
	"regexp"
	"strings"
)

// secrets collects values that must never be printed: DSN and sink URL
// passwords, tokens in query strings.
type secrets struct{ values []string }

var (
	kvPassword = regexp.MustCompile(`(?i)\bpassword\s*=\s*('[^']*'|\S+)`)
	// driverDSN is go-sql-driver/mysql's own form: user:pass@tcp(host:port)/db.
	driverDSN = regexp.MustCompile(`^[^:@/]*:(.*)@(?:tcp|unix)\(`)
)

// addURL records the password and secret-looking query values of a URL or
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
		for k, vs := range u.Query() {
			if isSecretKey(k) {
				for _, v := range vs {
					s.add(v)
				}
			}
		}
	} else if at := strings.LastIndex(raw, "@"); at > 0 {
		// Not parseable as a URL, e.g. a password with a raw '/' or '#':
		// treat everything between "://user:" and the last '@' as secret.
		if i := strings.Index(raw, "://"); i >= 0 {
			cred := raw[i+3 : at]
			if j := strings.IndexByte(cred, ':'); j >= 0 {
				s.add(cred[j+1:])
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

func isSecretKey(k string) bool {
	k = strings.ToLower(k)
	for _, w := range []string{"password", "secret", "token", "key", "auth"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

func (s *secrets) add(v string) {
	if len(v) >= 3 {
		s.values = append(s.values, v)
	}
}

// redact replaces every recorded secret in text with "xxxxx".
func (s *secrets) redact(text string) string {
	for _, v := range s.values {
		text = strings.ReplaceAll(text, v, "xxxxx")
	}
	return text
}

// redactURL returns raw with its password replaced, for display.
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
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	q := u.Query()
	changed := false
	for k := range q {
		if isSecretKey(k) {
			q.Set(k, "xxxxx")
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.String()
}
