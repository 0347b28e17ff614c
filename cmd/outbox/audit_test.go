package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/txoutbox/outbox/store"
)

// TestAuditVerifyCLI runs the audit trail from the command line: a relay
// that retries through a flaky gateway and anchors the chain with a key,
// an operator's route change, then `outbox audit verify` passing on the
// untouched trail and failing, exit 1, naming the record, after one UPDATE
// made by SQL; and a cut tail shown by the anchor the relay logged.
func TestAuditVerifyCLI(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			dir := t.TempDir()
			key := filepath.Join(dir, "anchor.key")
			out := mustCLI(t, "", "audit", "keygen", "--out", key)
			if !strings.Contains(out, "ed25519-public:") {
				t.Fatalf("keygen printed %q; want the public key", out)
			}
			if _, errOut, code := cli(t, "", "audit", "keygen", "--out", key); code != 2 || !strings.Contains(errOut, "never overwrites") {
				t.Fatalf("keygen over an existing key: exit %d, %q; want 2 and a refusal", code, errOut)
			}
			if b, err := os.ReadFile(key); err != nil || strings.Contains(out, strings.TrimSpace(string(b))) {
				t.Fatalf("keygen printed its signing key (or the file is unreadable: %v)", err)
			}

			// Each event's first attempt meets a 503: a RETRY row each (links 1 to
			// 6); the relay anchors link 6 when it stops.
			var mu sync.Mutex
			seen := map[string]bool{}
			gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id := r.Header.Get("Outbox-Event-Id")
				mu.Lock()
				again := seen[id]
				seen[id] = true
				mu.Unlock()
				if !again {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusOK)
			}))
			defer gw.Close()
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
			mustCLI(t, eventLines(6, 3, ""), "enqueue", "--db", dsn, "--table", table)
			_, logs, code := cli(t, "", "relay", "--db", dsn, "--table", table, "--sink", gw.URL, "--drain",
				"--poll-interval", "20ms", "--backoff-min", "10ms", "--backoff-max", "20ms", "--breaker-off",
				"--audit-anchor-key", key, "--log-format", "json")
			if code != 0 {
				t.Fatalf("relay: exit %d\n%s", code, logs)
			}
			logFile := filepath.Join(dir, "relay.log")
			if err := os.WriteFile(logFile, []byte(logs), 0o600); err != nil {
				t.Fatal(err)
			}
			mustCLI(t, "", "routes", "open", "gateway", "--reason", "maintenance", "--db", dsn, "--table", table)

			verify := func(extra ...string) (map[string]any, string, int) {
				t.Helper()
				args := append([]string{"audit", "verify", "--json", "--verify-key", key + ".pub", "--db", dsn, "--table", table}, extra...)
				out, errOut, code := cli(t, "", args...)
				var r map[string]any
				if err := json.Unmarshal([]byte(out), &r); err != nil {
					t.Fatalf("audit verify --json printed %q (stderr %q): %v", out, errOut, err)
				}
				return r, errOut, code
			}
			r, errOut, code := verify("--anchors-file", logFile)
			byKind, _ := r["by_kind"].(map[string]any)
			if code != 0 || count(byKind, "attempt") != 6 || count(byKind, "route") != 1 || count(byKind, "note") != 1 || count(r, "anchors") != 2 {
				t.Fatalf("untouched trail: exit %d, report %v, stderr %q; want exit 0, 6 RETRY attempts, 1 route change, "+
					"the anchor note, and the anchor checked twice (audit log and relay log)", code, r, errOut)
			}
			text := mustCLI(t, "", "audit", "verify", "--db", dsn, "--table", table)
			if !strings.Contains(text, "audit chain of "+table+": OK") || !strings.Contains(text, "1 not checked") {
				t.Fatalf("audit verify printed:\n%s", text)
			}

			db := auditSQL(t, bc.name, dsn)
			tables, err := store.TablesFor(table)
			if err != nil {
				t.Fatal(err)
			}
			exec := func(q string) {
				t.Helper()
				if _, err := db.ExecContext(context.Background(), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			exec("UPDATE " + tables.RouteLogTable() + " SET reason = 'nothing happened'")
			_, errOut, code = verify()
			if code != 1 || !strings.Contains(errOut, "(route ") || !strings.Contains(errOut, "changed after it was chained") {
				t.Fatalf("after an UPDATE of the route log: exit %d, stderr %q; want exit 1 naming the route record", code, errOut)
			}
			exec("UPDATE " + tables.RouteLogTable() + " SET reason = 'maintenance'")

			// Cut the tail from the link the relay's last anchor signed
			// (the last attempt), with the records of the cut links, and
			// set the head back. Only the logged anchor shows it.
			var anchor struct {
				Anchor string `json:"anchor"`
			}
			for _, line := range strings.Split(logs, "\n") {
				if strings.Contains(line, "anchored the audit chain") {
					if err := json.Unmarshal([]byte(line), &anchor); err != nil {
						t.Fatal(err)
					}
				}
			}
			var a struct{ Seq int64 }
			if err := json.Unmarshal([]byte(anchor.Anchor), &a); err != nil || a.Seq != 6 {
				t.Fatalf("the relay's last anchor %q (%v) signs link %d; want link 6, its last attempt", anchor.Anchor, err, a.Seq)
			}
			var ref, hash string
			if err := db.QueryRowContext(context.Background(), rebind(bc.name, "SELECT ref FROM "+tables.ChainTable()+" WHERE seq = ?"), a.Seq).Scan(&ref); err != nil {
				t.Fatal(err)
			}
			if err := db.QueryRowContext(context.Background(), rebind(bc.name, "SELECT hash FROM "+tables.ChainTable()+" WHERE seq = ?"), a.Seq-1).Scan(&hash); err != nil {
				t.Fatal(err)
			}
			parts := strings.Split(ref, "/")
			if _, err := db.ExecContext(context.Background(), rebind(bc.name, "DELETE FROM "+tables.Attempts+" WHERE event_id = ? AND claim_token = ? AND outcome = ?"),
				parts[0], parts[1], parts[2]); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(context.Background(), rebind(bc.name, "DELETE FROM "+tables.ChainTable()+" WHERE seq >= ?"), a.Seq); err != nil {
				t.Fatal(err)
			}
			exec("DELETE FROM " + tables.RouteLogTable())
			exec("DELETE FROM " + tables.AuditLogTable())
			if _, err := db.ExecContext(context.Background(), rebind(bc.name, "UPDATE "+tables.ChainHeadTable()+" SET seq = ?, hash = ? WHERE id = 1"), a.Seq-1, hash); err != nil {
				t.Fatal(err)
			}
			if r, _, code := verify(); code != 0 {
				t.Fatalf("without the logged anchor the cut tail cannot be seen; got exit %d, %v", code, r)
			}
			_, errOut, code = verify("--anchors-file", logFile)
			if code != 1 || !strings.Contains(errOut, "links were deleted from its tail") {
				t.Fatalf("with the relay's log: exit %d, stderr %q; want exit 1 and the cut tail named", code, errOut)
			}
		})
	}
}

// auditSQL opens the test's database as someone with SQL access would.
func auditSQL(t *testing.T, kind, dsn string) *sql.DB {
	t.Helper()
	if kind != "sqlite" {
		return openSQL(t, kind, dsn)
	}
	db, err := sql.Open("sqlite", strings.TrimPrefix(dsn, "sqlite://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func rebind(kind, q string) string {
	if kind != "postgres" {
		return q
	}
	for i := 1; strings.Contains(q, "?"); i++ {
		q = strings.Replace(q, "?", "$"+string(rune('0'+i)), 1)
	}
	return q
}
