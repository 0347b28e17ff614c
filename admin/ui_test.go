package admin_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox/admin"
	"github.com/txoutbox/outbox/store"
)

// browserless is a cookie-keeping client that does not follow redirects.
func browserless(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func fetch(t *testing.T, c *http.Client, method, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, secret := range []string{viewerToken, operatorToken, operator2} {
		if strings.Contains(string(b), secret) {
			t.Fatalf("%s %s: a token is in the page", method, u)
		}
	}
	return resp, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

func TestDashboardSessionAndCSRF(t *testing.T) {
	b := newSQLite(t)
	base := serve(t, admin.Config{Store: b.store, FailedBlocks: true})
	ids := b.enqueue(t, payment("ui-1", 1), payment("ui-1", 2))
	failHeads(t, b.store, "status 502 Bad Gateway")
	c := browserless(t)

	resp, _ := fetch(t, c, "GET", base+"/events", nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Fatalf("no session: %d %s, want a redirect to /login", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, _ = fetch(t, c, "POST", base+"/login", url.Values{"token": {"wrong-token-wrong-token"}})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", resp.StatusCode)
	}
	resp, _ = fetch(t, c, "POST", base+"/login", url.Values{"token": {operatorToken}, "next": {"https://evil.example/"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d, Location %q (an outside next must be refused)", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookie := resp.Header.Get("Set-Cookie")
	if !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Fatalf("session cookie %q lacks HttpOnly or SameSite", cookie)
	}
	for _, page := range []string{"/", "/events", "/events?status=FAILED", "/events/" + ids[0].String(), "/dead-letters",
		"/failure-groups", "/blocked", "/relays", "/destinations"} {
		resp, body := fetch(t, c, "GET", base+page, nil)
		if resp.StatusCode != 200 || !strings.Contains(body, "alice (operator)") {
			t.Fatalf("%s: %d\n%s", page, resp.StatusCode, body)
		}
	}
	_, body := fetch(t, c, "GET", base+"/events/"+ids[0].String(), nil)
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token in the event page")
	}
	// A post without the CSRF token is refused and changes nothing.
	resp, _ = fetch(t, c, "POST", base+"/events/"+ids[0].String()+"/retry", url.Values{"confirm": {"yes"}})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("post without CSRF: %d, want 403", resp.StatusCode)
	}
	// The API with the session cookie needs it too.
	resp, _ = fetch(t, c, "POST", base+"/api/v1/events/"+ids[0].String()+"/retry", url.Values{})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("API post with a cookie and no CSRF: %d, want 403", resp.StatusCode)
	}
	if s := statusOf(t, b.store, ids[0]); s != "FAILED" {
		t.Fatalf("a refused post changed the event to %s", s)
	}
	// The dry run asks for confirmation; the confirmation applies it.
	_, body = fetch(t, c, "POST", base+"/events/"+ids[0].String()+"/retry", url.Values{"csrf_token": {m[1]}})
	if !strings.Contains(body, "would release up to 1 BLOCKED event") || statusOf(t, b.store, ids[0]) != "FAILED" {
		t.Fatalf("dry run page:\n%s", body)
	}
	resp, _ = fetch(t, c, "POST", base+"/events/"+ids[0].String()+"/retry", url.Values{"csrf_token": {m[1]}, "confirm": {"yes"}})
	if resp.StatusCode != http.StatusSeeOther || statusOf(t, b.store, ids[0]) != "PENDING" {
		t.Fatalf("confirmed retry: %d, event %s", resp.StatusCode, statusOf(t, b.store, ids[0]))
	}
	// Logging out ends the session.
	fetch(t, c, "POST", base+"/logout", url.Values{"csrf_token": {m[1]}})
	resp, _ = fetch(t, c, "GET", base+"/events", nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after logout: %d, want a redirect to /login", resp.StatusCode)
	}
}

// The relays page shows each route's circuit breaker as the relays share
// it through the store, read from the store's route table by default.
func TestRelaysPageShowsBreakerStates(t *testing.T) {
	b := newSQLite(t)
	rs := b.store
	ctx := context.Background()
	if applied, err := rs.ChangeRoute(ctx, store.RouteChange{Route: "https://gateway.example/approve", To: store.BreakerOpen,
		ProbeIn: time.Minute, Opens: 1, Actor: "relay-a", Reason: "test", LastError: "status 503 Service Unavailable"}); err != nil || !applied {
		t.Fatalf("open the route: %v, %v", applied, err)
	}
	base := serve(t, admin.Config{Store: b.store})
	c := browserless(t)
	resp, _ := fetch(t, c, "POST", base+"/login", url.Values{"token": {viewerToken}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	resp, body := fetch(t, c, "GET", base+"/relays", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "https://gateway.example/approve") || !strings.Contains(body, "OPEN") ||
		!strings.Contains(body, "status 503 Service Unavailable") {
		t.Fatalf("relays page: %d, want the open route with its last error\n%s", resp.StatusCode, body)
	}
}
