package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestCLIEncryption: with --encryption-key-file, `outbox enqueue` seals
// payloads, `events list` and `events show` never print them, `keys
// rotate` rewraps every data key with the new key-encryption key, `keys
// shred` makes a subject's payloads unreadable (events show says so) and
// the relay then fails its event unsent while the gateway receives the
// other subject's plaintext; no output ever holds a key. On each database.
func TestCLIEncryption(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			dir := t.TempDir()
			oldKey, newKey := writeKey(t, dir, "old.key"), writeKey(t, dir, "new.key")
			db := []string{"--db", dsn, "--table", table}
			with := func(args ...string) []string { return append(args, db...) }
			var outputs []string
			run := func(stdin string, args ...string) string {
				t.Helper()
				out, errOut, code := cli(t, stdin, args...)
				outputs = append(outputs, out, errOut)
				if code != 0 {
					t.Fatalf("outbox %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
				}
				return out
			}
			run("", with("migrate")...)
			const marker = "MARKER-4111111111111111"
			lines := `{"aggregate_type":"payment","aggregate_id":"a","event_type":"Approved","payload":{"card":"` + marker + `"}}
{"aggregate_type":"payment","aggregate_id":"b","event_type":"Approved","payload":{"card":"` + marker + `"},"encryption_subject":"customer/b"}
`
			ids := strings.Fields(run(lines, with("enqueue", "--encryption-key-file", filepath.Join(dir, "old.key"))...))
			if len(ids) != 2 {
				t.Fatalf("enqueue printed %v; want 2 ids", ids)
			}
			list := run("", with("events", "list", "--json")...)
			if strings.Contains(list, marker) || !strings.Contains(list, `"encrypted"`) {
				t.Fatalf("events list --json shows the plaintext or no placeholder:\n%s", list)
			}
			show := run("", with("events", "show", ids[0])...)
			if strings.Contains(show, marker) || !strings.Contains(show, "encrypted (subject payment/a, key version 1)") {
				t.Fatalf("events show:\n%s", show)
			}
			oldID := strings.TrimSpace(run("", "keys", "id", "--encryption-key-file", filepath.Join(dir, "old.key")))
			newID := strings.TrimSpace(run("", "keys", "id", "--encryption-key-file", filepath.Join(dir, "new.key")))
			if !strings.HasPrefix(oldID, "kek-") || oldID == newID {
				t.Fatalf("key ids %q and %q", oldID, newID)
			}
			if keys := run("", with("keys", "list")...); !strings.Contains(keys, "payment/a") || !strings.Contains(keys, "customer/b") || !strings.Contains(keys, oldID) {
				t.Fatalf("keys list:\n%s", keys)
			}

			// Rotation: the new key alongside the old one.
			out := run("", with("keys", "rotate", "--encryption-key-file", filepath.Join(dir, "new.key"),
				"--encryption-previous-key-file", filepath.Join(dir, "old.key"))...)
			if !strings.Contains(out, "2 data keys rewrapped with "+newID) {
				t.Fatalf("keys rotate printed %q", out)
			}
			var keys []struct {
				Subject string `json:"subject"`
				KEKID   string `json:"kek_id"`
			}
			if err := json.Unmarshal([]byte(run("", with("keys", "list", "--json")...)), &keys); err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if k.KEKID != newID {
					t.Fatalf("after the rotation %s is wrapped by %s; want %s", k.Subject, k.KEKID, newID)
				}
			}

			// Shredding payment/a.
			out = run("", with("keys", "shred", "--subject", "payment/a", "--reason", "erasure request 12", "--actor", "dpo")...)
			if !strings.Contains(out, "shredded 1 data key version(s) of subject \"payment/a\"") {
				t.Fatalf("keys shred printed %q", out)
			}
			show = run("", with("events", "show", ids[0])...)
			if !strings.Contains(show, "shredded") || !strings.Contains(show, "erasure request 12") {
				t.Fatalf("events show after the shred:\n%s", show)
			}

			// The relay, with the new key alone: the gateway gets b's plaintext;
			// a's event ends FAILED, never sent.
			var mu sync.Mutex
			var bodies []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				bodies = append(bodies, string(b)+"\n"+strings.Join(headerValues(r.Header), " "))
				mu.Unlock()
			}))
			t.Cleanup(srv.Close)
			run("", with("relay", "--sink", srv.URL, "--drain", "--encryption-key-file", filepath.Join(dir, "new.key"))...)
			mu.Lock()
			got := append([]string(nil), bodies...)
			mu.Unlock()
			if len(got) != 1 || !strings.Contains(got[0], marker) || !strings.Contains(got[0], ids[1]) {
				t.Fatalf("the gateway received %q; want event %s's plaintext alone", got, ids[1])
			}
			show = run("", with("events", "show", ids[0])...)
			if !strings.Contains(show, "FAILED") || !strings.Contains(show, "payload unreadable, never sent") {
				t.Fatalf("events show of the shredded subject's event after the relay:\n%s", show)
			}
			// The shredding is in the audit log, and the chain (over the
			// stored bytes, which shredding leaves) still verifies.
			var report struct {
				ByKind map[string]int `json:"by_kind"`
			}
			if err := json.Unmarshal([]byte(run("", with("audit", "verify", "--json")...)), &report); err != nil || report.ByKind["note"] != 1 {
				t.Fatalf("audit verify after the shred: %+v, %v; want it to verify with the shred's note chained", report, err)
			}

			// Bad keys are refused, naming the file and never the key.
			short := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
			if err := os.WriteFile(filepath.Join(dir, "short.key"), []byte(short), 0o600); err != nil {
				t.Fatal(err)
			}
			o, e, code := cli(t, lines, with("enqueue", "--encryption-key-file", filepath.Join(dir, "short.key"))...)
			outputs = append(outputs, o, e)
			if code == 0 || !strings.Contains(e, "short.key") || !strings.Contains(e, "16 bytes") || strings.Contains(e, short) {
				t.Fatalf("enqueue with a 16-byte key: exit %d, stderr %q", code, e)
			}
			_, e, code = cli(t, "", with("keys", "rotate", "--encryption-key-file", filepath.Join(dir, "new.key"))...)
			if code == 0 || !strings.Contains(e, "previous key-encryption key") {
				t.Fatalf("keys rotate without the previous key: exit %d, stderr %q", code, e)
			}
			for _, o := range outputs {
				if strings.Contains(o, oldKey) || strings.Contains(o, newKey) {
					t.Fatalf("a command printed a key-encryption key:\n%s", o)
				}
			}
		})
	}
}

func headerValues(h http.Header) []string {
	var out []string
	for _, vs := range h {
		out = append(out, vs...)
	}
	return out
}

// writeKey writes a new random key-encryption key, base64, to dir/name
// and returns its text.
func writeKey(t *testing.T, dir, name string) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	text := base64.StdEncoding.EncodeToString(b)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return text
}

// TestFanOutEncrypted: with a destinations file and encryption on, each
// destination's relay opens the sealed payloads copied into its table with
// the data keys of the outbox table they came from: both destinations
// receive the plaintext, and `events show --config` shows every copy
// sealed. On each database.
func TestFanOutEncrypted(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			dir := t.TempDir()
			writeKey(t, dir, "kek")
			key := filepath.Join(dir, "kek")
			var mu sync.Mutex
			got := map[string][]string{}
			record := func(name string) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, _ := io.ReadAll(r.Body)
					mu.Lock()
					got[name] = append(got[name], string(b))
					mu.Unlock()
				})
			}
			gw, audit := httptest.NewServer(record("gateway")), httptest.NewServer(record("audit"))
			t.Cleanup(gw.Close)
			t.Cleanup(audit.Close)
			file := filepath.Join(dir, "destinations.yaml")
			body := "destinations:\n  gateway: { url: \"" + gw.URL + "\" }\n  audit: { url: \"" + audit.URL + "\" }\n" +
				"routes:\n  - match: { aggregate_type: payment }\n    to: [gateway, audit]\n"
			if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			const marker = "MARKER-5500000000000004"
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table, "--config", file)
			ids := strings.Fields(mustCLI(t, `{"aggregate_type":"payment","aggregate_id":"f-1","event_type":"Approved","payload":{"card":"`+marker+`"}}`,
				"enqueue", "--db", dsn, "--table", table, "--encryption-key-file", key))
			if len(ids) != 1 {
				t.Fatalf("enqueue printed %v", ids)
			}
			mustCLI(t, "", "relay", "--db", dsn, "--table", table, "--config", file, "--drain", "--poll-interval", "10ms",
				"--progress", "0", "--encryption-key-file", key)
			mu.Lock()
			defer mu.Unlock()
			for _, name := range []string{"gateway", "audit"} {
				if len(got[name]) != 1 || !strings.Contains(got[name][0], marker) {
					t.Errorf("destination %s received %q; want the plaintext once", name, got[name])
				}
			}
			show := mustCLI(t, "", "events", "show", ids[0], "--db", dsn, "--table", table, "--config", file)
			if strings.Contains(show, marker) || strings.Count(show, "encrypted (subject payment/f-1, key version 1)") != 3 {
				t.Errorf("events show --config should show the event and its two copies sealed:\n%s", show)
			}
		})
	}
}
