package main

import (
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/txoutbox/outbox/internal/redact"
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
const mask = redact.Mask

var (
	// userinfoPassword: scheme://user:SECRET@ (SECRET without '@', '/' or space).
	userinfoPassword = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@]*:)[^\s@/]*@`)
	// optionSecret: key=SECRET, key = 'SECRET', key="SECRET" for a secret key.
	optionSecret = regexp.MustCompile(`(?i)\b(` + strings.Join(redact.SecretKeys, "|") + `)(\s*=\s*)('[^']*'|"[^"]*"|[^\s&'"]+)`)
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
func redactURL(raw string) string { return redact.URL(raw) }
