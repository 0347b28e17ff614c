package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAdminCommandDestinations runs `outbox admin --config FILE` on
// PostgreSQL: the Destinations API lists each destination of the file with
// its own table and its URL without the password, and an operator's open
// by hand lands in that destination table's route log under the
// operator's name, as `outbox routes list` shows it.
func TestAdminCommandDestinations(t *testing.T) {
	const pw = "gw-Sup3rSecretPw"
	dsn := postgresDSN(t)
	table := newTable()
	file := filepath.Join(t.TempDir(), "destinations.yaml")
	body := `destinations:
  gateway: { url: "https://app:` + pw + `@gw.test/approve" }
  ledger:  { url: "kafka://127.0.0.1:1?topic=ledger" }
routes:
  - match: {}
    to: [gateway, ledger]
`
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, "", "migrate", "--db", dsn, "--table", table, "--config", file)
	cmd, stderr := startProcess(t, []string{"OUTBOX_ADMIN_TOKENS=viewer vera " + cliViewerToken + "\noperator oscar " + cliOperatorToken,
		"OUTBOX_CONFIG=" + file}, "admin", "--db", dsn, "--table", table, "--listen", "127.0.0.1:0")
	var addr string
	waitUntil(t, 30*time.Second, "the admin endpoint", func() bool {
		if m := adminAddrRE.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
			return true
		}
		return cmd.ProcessState != nil
	}, stderr)
	base := "http://" + addr

	code, out := adminRequest(t, "GET", base+"/api/v1/destinations", cliViewerToken)
	if code != 200 || strings.Contains(out, pw) {
		t.Fatalf("destinations: %d (a password must never show)\n%s", code, out)
	}
	var got struct {
		Destinations []struct{ Name, Table, URL string }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Destinations) != 2 || got.Destinations[0].Name != "gateway" || got.Destinations[0].Table != table+"_to_gateway" ||
		!strings.HasPrefix(got.Destinations[0].URL, "https://app:") || !strings.HasSuffix(got.Destinations[0].URL, "@gw.test/approve") ||
		got.Destinations[1].Name != "ledger" || got.Destinations[1].Table != table+"_to_ledger" {
		t.Fatalf("destinations:\n%s", out)
	}
	if code, out := adminRequest(t, "POST", base+"/api/v1/destinations/ledger/open?route=ledger.events&reason=broker+down", cliOperatorToken); code != http.StatusOK {
		t.Fatalf("open: %d %s", code, out)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("admin exit: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), pw) || strings.Contains(stderr.String(), cliOperatorToken) {
		t.Fatalf("a secret is in the log:\n%s", stderr.String())
	}
	list := mustCLI(t, "", "routes", "list", "--db", dsn, "--table", table+"_to_ledger")
	if !strings.Contains(list, "ledger.events") || !strings.Contains(list, "operator:oscar") || !strings.Contains(list, "broker down") {
		t.Fatalf("routes list of the ledger's table:\n%s", list)
	}
	if list := mustCLI(t, "", "routes", "list", "--db", dsn, "--table", table+"_to_gateway"); !strings.Contains(list, "every route is CLOSED") {
		t.Fatalf("the gateway's table changed too:\n%s", list)
	}
}
