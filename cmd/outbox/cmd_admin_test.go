package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	cliViewerToken   = "cli-viewer-token-0123456789abcdef"
	cliOperatorToken = "cli-operator-token-0123456789abcd"
)

func adminRequest(t *testing.T, method, u, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var eventIDRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// TestRelayAdminMountsTheAdminAPI runs a relay with --admin and tokens:
// the admin API answers beside /metrics, lists the relay through its
// heartbeat, refuses a viewer's action, and an operator's retry is audited
// under the operator's name, which `events show` prints.
func TestRelayAdminMountsTheAdminAPI(t *testing.T) {
	dsn := postgresDSN(t)
	table := newTable()
	mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
	mustCLI(t, adminEventLines(), "enqueue", "--db", dsn, "--table", table)
	gw := httptest.NewServer(&failingGateway{})
	t.Cleanup(gw.Close)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("viewer vera "+cliViewerToken+"\n# comment\noperator oscar "+cliOperatorToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startAdminRelay(t, "--db", dsn, "--table", table, "--sink", gw.URL, "--admin-tokens-file", tokens,
		"--heartbeat", "100ms", "--relay-id", "relay-under-test")
	base := "http://" + r.addr
	if want := `paths="/metrics /healthz /readyz /api/v1/ / (web UI)"`; !strings.Contains(r.stderr.String(), want) {
		t.Errorf("the start log line does not list the admin API (want %s):\n%s", want, r.stderr.String())
	}
	if code, _ := adminRequest(t, "GET", base+"/api/v1/stats", ""); code != http.StatusUnauthorized {
		t.Fatalf("stats without a token: %d, want 401", code)
	}
	if code, _ := httpGet(t, base+"/metrics"); code != 200 {
		t.Fatalf("/metrics beside the admin API: %d", code)
	}
	waitUntil(t, 30*time.Second, "the relay in /api/v1/relays and a FAILED event", func() bool {
		_, relays := adminRequest(t, "GET", base+"/api/v1/relays", cliViewerToken)
		_, failed := adminRequest(t, "GET", base+"/api/v1/events?status=FAILED", cliViewerToken)
		return strings.Contains(relays, `"relay_id": "relay-under-test"`) && eventIDRE.MatchString(failed)
	}, r.stderr)
	_, body := adminRequest(t, "GET", base+"/api/v1/events?status=FAILED", cliViewerToken)
	var list struct {
		Events []struct {
			EventID string `json:"event_id"`
		}
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Events) != 1 {
		t.Fatalf("FAILED events: %v %s", err, body)
	}
	id := list.Events[0].EventID
	if code, _ := adminRequest(t, "POST", base+"/api/v1/events/"+id+"/retry", cliViewerToken); code != http.StatusForbidden {
		t.Fatalf("viewer retry: %d, want 403", code)
	}
	if code, b := adminRequest(t, "POST", base+"/api/v1/events/"+id+"/retry?reason=test", cliOperatorToken); code != 200 {
		t.Fatalf("operator retry: %d %s", code, b)
	}
	r.stop(t)
	out := mustCLI(t, "", "events", "show", "--db", dsn, "--table", table, id)
	if !strings.Contains(out, "operator:oscar") {
		t.Fatalf("events show does not name the operator:\n%s", out)
	}
	if strings.Contains(r.stderr.String(), cliOperatorToken) || strings.Contains(r.stderr.String(), cliViewerToken) {
		t.Fatal("a token is in the relay's log")
	}
}

func TestAdminCommandRefusesUnsafeSetups(t *testing.T) {
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "outbox.db")
	mustCLI(t, "", "migrate", "--db", dsn)
	_, errOut, code := cli(t, "", "admin", "--db", dsn, "--listen", "0.0.0.0:0", "--insecure-no-auth")
	if code == 0 || !strings.Contains(errOut, "only on a loopback address") {
		t.Fatalf("--insecure-no-auth beyond loopback: exit %d\n%s", code, errOut)
	}
	t.Setenv("OUTBOX_ADMIN_TOKENS", "")
	_, errOut, code = cli(t, "", "admin", "--db", dsn, "--listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errOut, "needs tokens") {
		t.Fatalf("no tokens: exit %d\n%s", code, errOut)
	}
	t.Setenv("OUTBOX_ADMIN_TOKENS", "admin root "+cliOperatorToken)
	_, errOut, code = cli(t, "", "admin", "--db", dsn, "--listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errOut, "neither viewer nor operator") || strings.Contains(errOut, cliOperatorToken) {
		t.Fatalf("bad role: exit %d\n%s", code, errOut)
	}
	// Fields in the wrong order: the token is never echoed.
	for _, line := range []string{cliOperatorToken + " operator root", "operator " + cliOperatorToken + " root"} {
		t.Setenv("OUTBOX_ADMIN_TOKENS", line)
		_, errOut, code = cli(t, "", "admin", "--db", dsn, "--listen", "127.0.0.1:0")
		if code == 0 || !strings.Contains(errOut, "ROLE NAME TOKEN") || strings.Contains(errOut, cliOperatorToken) {
			t.Fatalf("fields out of order (%d): exit %d\n%s", len(line), code, errOut)
		}
	}
}
