package admin

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/txoutbox/outbox"
)

// Role is what a token may do.
type Role string

const (
	// Viewer reads everything (payloads unless Config.RedactPayloads).
	Viewer Role = "viewer"
	// Operator also acts: retry, skip, purge.
	Operator Role = "operator"
)

// allows reports whether a holder of r may do what needs.
func (r Role) allows(needs Role) bool { return r == Operator || needs == Viewer }

// Token is one accepted bearer token.
type Token struct {
	Role  Role
	Name  string // who acts: it goes into the audit rows
	Token string
}

// String never shows the secret.
func (t Token) String() string { return string(t.Role) + " " + t.Name + " [redacted]" }

// Identity is who made a request.
type Identity struct {
	Name string
	Role Role
}

// MinTokenLen is the shortest token accepted.
const MinTokenLen = 16

// ParseTokens reads lines of "ROLE NAME TOKEN" (ROLE is viewer or
// operator); blank lines and lines starting with # are skipped. source
// names the input in errors, which never quote a token.
func ParseTokens(r io.Reader, source string) ([]Token, error) {
	var out []Token
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 3 {
			return nil, fmt.Errorf("%w: %s line %d: want \"ROLE NAME TOKEN\" (3 fields), got %d fields", outbox.ErrInvalidConfig, source, line, len(f))
		}
		t := Token{Role: Role(strings.ToLower(f[0])), Name: f[1], Token: f[2]}
		if t.Role != Viewer && t.Role != Operator {
			return nil, fmt.Errorf("%w: %s line %d: role %s is neither viewer nor operator (want \"ROLE NAME TOKEN\")", outbox.ErrInvalidConfig, source, line, shown(f[0]))
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if err := checkTokens(out); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return out, nil
}

// LoadTokens reads the tokens of file (if not empty) and of the
// OUTBOX_ADMIN_TOKENS variable's value env (lines, or entries separated
// by ';' or ',').
func LoadTokens(file, env string) ([]Token, error) {
	var out []Token
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("%w: --tokens-file: %v", outbox.ErrInvalidConfig, err)
		}
		defer f.Close()
		ts, err := ParseTokens(f, file)
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	if env != "" {
		env = strings.NewReplacer(";", "\n", ",", "\n").Replace(env)
		ts, err := ParseTokens(strings.NewReader(env), "OUTBOX_ADMIN_TOKENS")
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	return out, checkTokens(out)
}

func checkTokens(ts []Token) error {
	seen := map[string]bool{}
	for i, t := range ts {
		if t.Role != Viewer && t.Role != Operator {
			return fmt.Errorf("%w: token %d (%s): role must be viewer or operator", outbox.ErrInvalidConfig, i+1, shown(t.Name))
		}
		if t.Name == "" {
			return fmt.Errorf("%w: token %d has no name", outbox.ErrInvalidConfig, i+1)
		}
		if len(t.Token) < MinTokenLen {
			return fmt.Errorf("%w: the token of %s is shorter than %d characters (want \"ROLE NAME TOKEN\"): use e.g. `openssl rand -hex 24`", outbox.ErrInvalidConfig, shown(t.Name), MinTokenLen)
		}
		if seen[t.Token] {
			return fmt.Errorf("%w: the token of %s is given twice", outbox.ErrInvalidConfig, shown(t.Name))
		}
		seen[t.Token] = true
	}
	return nil
}

type authenticator struct {
	tokens []tokenHash
	noAuth bool
}

type tokenHash struct {
	sum [32]byte
	id  Identity
}

func newAuthenticator(ts []Token, noAuth bool) *authenticator {
	a := &authenticator{noAuth: noAuth}
	for _, t := range ts {
		a.tokens = append(a.tokens, tokenHash{sha256.Sum256([]byte(t.Token)), Identity{Name: t.Name, Role: t.Role}})
	}
	return a
}

// check returns the identity of token, comparing in constant time.
func (a *authenticator) check(token string) (Identity, bool) {
	sum := sha256.Sum256([]byte(token))
	var found Identity
	ok := false
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			found, ok = t.id, true
		}
	}
	return found, ok
}

const sessionCookie = "outbox_admin_session"

type session struct {
	id      Identity
	csrf    string
	expires time.Time
}

// sessions are the dashboard's logins, kept in memory: a restart logs
// everyone out.
type sessions struct {
	mu  sync.Mutex
	ttl time.Duration
	m   map[string]session
}

func newSessions(ttl time.Duration) *sessions { return &sessions{ttl: ttl, m: map[string]session{}} }

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *sessions) create(id Identity) (key string, sess session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for k, v := range s.m {
		if now.After(v.expires) {
			delete(s.m, k)
		}
	}
	key = randomToken()
	sess = session{id: id, csrf: randomToken(), expires: now.Add(s.ttl)}
	s.m[key] = sess
	return key, sess
}

func (s *sessions) get(key string) (session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok || time.Now().After(v.expires) {
		delete(s.m, key)
		return session{}, false
	}
	return v, true
}

func (s *sessions) remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

// authResult is who a request comes from and how it proved it.
type authResult struct {
	id      Identity
	ok      bool
	session *session // set for a cookie session: form posts need its CSRF token
}

func (h *Handler) authenticate(r *http.Request) authResult {
	if h.auth.noAuth {
		return authResult{id: Identity{Name: "anonymous", Role: Operator}, ok: true}
	}
	if v := r.Header.Get("Authorization"); v != "" {
		tok, found := strings.CutPrefix(v, "Bearer ")
		if !found {
			return authResult{}
		}
		id, ok := h.auth.check(strings.TrimSpace(tok))
		return authResult{id: id, ok: ok}
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if s, ok := h.sessions.get(c.Value); ok {
			return authResult{id: s.id, ok: true, session: &s}
		}
	}
	return authResult{}
}

// csrfOK checks the CSRF token of a state-changing request made with a
// session cookie: the form field csrf_token or the X-CSRF-Token header.
func csrfOK(r *http.Request, s *session) bool {
	if s == nil {
		return true // bearer tokens are not sent by browsers on their own
	}
	got := r.Header.Get("X-CSRF-Token")
	if got == "" {
		got = r.PostFormValue("csrf_token")
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) == 1
}

type ctxKey struct{}

func withIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// IdentityFrom returns the identity of the request's context.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}

// shown quotes a field of a tokens line for an error message, unless it is
// as long as a token: fields given in the wrong order must not put a
// secret into an error or a log.
func shown(s string) string {
	if len(s) >= MinTokenLen {
		return "(a value as long as a token, not shown)"
	}
	return fmt.Sprintf("%q", s)
}
