package main

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/txoutbox/outbox/internal/destconfig"
)

// TestDestinationSchemesAreTheSinkSchemes: a destination URL is checked
// for every scheme --sink opens, and for no other.
func TestDestinationSchemesAreTheSinkSchemes(t *testing.T) {
	t.Parallel()
	var sinks []string
	for s := range sinkKinds {
		sinks = append(sinks, s)
	}
	sort.Strings(sinks)
	if got := destconfig.Schemes(); !slices.Equal(got, sinks) {
		t.Errorf("destconfig.Schemes() = %v, the sink schemes are %v", got, sinks)
	}
}

func writeDestinationsFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "payments.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const gatewaySigningSecret = "whsec_c2VjcmV0LW9mLXRoZS1nYXRld2F5LWZvci10ZXN0cw=="

func TestRelayConfigCheckPrintsThePlan(t *testing.T) {
	t.Setenv("GW_SECRET", gatewaySigningSecret)
	path := writeDestinationsFile(t, `destinations:
  gateway: { url: "https://gateway.example/approve?sign_secret_env=GW_SECRET" }
  events:  { url: "amqp://app:rabbit-pass-word@rabbit:5672/?exchange=outbox" }
routes:
  - match: { event_type: ApprovalRequested }
    to: [gateway, events]
  - match: {}
    to: [events]
`)
	// Without --db, no database is opened.
	out, errOut, code := cli(t, "", "relay", "--config", path, "--check")
	if code != 0 {
		t.Fatalf("relay --config --check: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, want := range []string{
		"destinations (" + path + "):",
		"gateway  https://gateway.example/approve?sign_secret_env=GW_SECRET  (line 2; route 1)",
		"events   amqp://app:xxxxx@rabbit:5672/?exchange=outbox  (line 3; route 1, 2)",
		"1. event_type ApprovalRequested -> gateway, events  (line 5)",
		"2. every event -> events  (line 7)",
		"gateway: outbox_events_to_gateway",
		"events: outbox_events_to_events",
		path + ": the file is valid.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	// With a database that cannot be reached, the check fails, and shows
	// no secret either.
	out2, errOut2, code := cli(t, "", "relay", "--config", path, "--check", "--db", "postgres://app:db-pass-word@127.0.0.1:1/pay")
	if code != 1 || out2 == "" && errOut2 == "" {
		t.Errorf("relay --config --check --db UNREACHABLE: exit %d, want 1\nstdout: %s\nstderr: %s", code, out2, errOut2)
	}
	for _, secret := range []string{gatewaySigningSecret, "rabbit-pass-word", "db-pass-word"} {
		if strings.Contains(out+errOut+out2+errOut2, secret) {
			t.Errorf("the output shows the secret %q:\nstdout: %s\nstderr: %s", secret, out+out2, errOut+errOut2)
		}
	}
}

// TestRelayConfigCheckReadsTheTableTypes: --check with --db says where the
// event types of the table's unfinished events go, and refuses those no
// route matches, naming them and the line of routes:.
func TestRelayConfigCheckReadsTheTableTypes(t *testing.T) {
	path := writeDestinationsFile(t, `destinations:
  gateway: { url: "https://gateway.example/approve" }
routes:
  - match: { event_type: ApprovalRequested }
    to: [gateway]
`)
	db, table := "sqlite://"+filepath.Join(t.TempDir(), "x.db"), newTable()
	mustCLI(t, "", "migrate", "--db", db, "--table", table)
	mustCLI(t, eventLines(3, 1, ""), "enqueue", "--db", db, "--table", table)
	out := mustCLI(t, "", "relay", "--config", path, "--check", "--db", db, "--table", table)
	for _, want := range []string{
		`event_type "ApprovalRequested", aggregate_type "payment" -> gateway  (route 1)`,
		"the file is valid, and routes every event type of the unfinished events of table " + table,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	refund := `{"aggregate_type":"refund","aggregate_id":"r-1","event_type":"RefundIssued","payload":{}}` + "\n"
	mustCLI(t, refund, "enqueue", "--db", db, "--table", table)
	out, errOut, code := cli(t, "", "relay", "--config", path, "--check", "--db", db, "--table", table)
	if code != 1 || !strings.Contains(out, `event_type "RefundIssued", aggregate_type "refund" -> NO ROUTE`) ||
		!strings.Contains(errOut, path+":3: no route matches 1 type pair(s)") {
		t.Errorf("--check with an unrouted type in the table: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

func TestRelayConfigCheckListsEveryProblem(t *testing.T) {
	path := writeDestinationsFile(t, `destinations:
  events: { url: "amqp://app:rabbit-pass-word@rabbit:5672/?exchange=outbox&no_such_option=1" }
routes:
  - match: { event_type: ApprovalRequested }
    to: [gateway]
`)
	out, errOut, code := cli(t, "", "relay", "--config", path, "--check")
	if code != 1 {
		t.Fatalf("relay --config --check of a bad file: exit %d, want 1\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if out != "" {
		t.Errorf("stdout = %q, want nothing", out)
	}
	for _, want := range []string{
		"\n  " + path + `:2: destination "events": url: amqp sink: URL "amqp://app:xxxxx@rabbit:5672/?...": unknown option "no_such_option"`,
		"\n  " + path + `:5: route 1: to: "gateway" is not a destination (defined: events)`,
		"\noutbox: destinations file " + path + " refused: 2 problem(s) to fix, listed above\n",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "rabbit-pass-word") {
		t.Errorf("stderr shows the password:\n%s", errOut)
	}
}

func TestRelayConfigCheckOfAMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.yaml")
	_, errOut, code := cli(t, "", "relay", "--config", path, "--check")
	if code != 1 || !strings.Contains(errOut, "destinations file: open "+path) || !strings.Contains(errOut, "could not be read") {
		t.Errorf("relay --config MISSING --check: exit %d, stderr %q; want 1 and the file named", code, errOut)
	}
}

// TestRelayConfigRefusesTheFlagsItReplaces: with a destinations file,
// the flags that say where events go (or that a relay with a file does not
// support yet) are refused with what to do instead, before any database is
// opened; OUTBOX_CONFIG counts as --config.
func TestRelayConfigRefusesTheFlagsItReplaces(t *testing.T) {
	path := writeDestinationsFile(t, "destinations: { d: { url: \"discard://\" } }\nroutes: [ { match: {}, to: [d] } ]\n")
	db := "sqlite://" + filepath.Join(t.TempDir(), "x.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sink", "discard://"}, "--sink cannot be used with --config: the destinations file says where events go"},
		{[]string{"--route", "merchant=audit"}, "--route cannot be used with --config: name the destination"},
		{[]string{"--route-limit", "payment.events=rate=1/s"}, "--route-limit cannot be used with --config: give the limits in the destination's URL"},
	} {
		args := append([]string{"relay", "--config", path, "--db", db}, tc.args...)
		out, errOut, code := cli(t, "", args...)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("outbox %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(args, " "), code, out, errOut, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(strings.TrimPrefix(db, "sqlite://")), "x.db")); err == nil {
		t.Errorf("a refused relay created the database")
	}
	t.Setenv("OUTBOX_CONFIG", path)
	if _, errOut, code := cli(t, "", "relay", "--sink", "discard://"); code != 2 || !strings.Contains(errOut, "--sink cannot be used with --config") {
		t.Errorf("relay with OUTBOX_CONFIG set: exit %d, stderr %q; want the refusal", code, errOut)
	}
}

func TestRelayCheckWithoutConfigIsRefused(t *testing.T) {
	t.Parallel()
	_, errOut, code := cli(t, "", "relay", "--check")
	if code == 0 || !strings.Contains(errOut, "--check checks a destinations file: give it with --config FILE") {
		t.Errorf("relay --check: exit %d, stderr %q", code, errOut)
	}
}

// TestRelayConfigBadFileRefusedAtStart: the relay itself (not only
// --check) refuses a file with an unknown key or a route to a destination
// that is not defined, naming each line to fix, before it opens the
// database.
func TestRelayConfigBadFileRefusedAtStart(t *testing.T) {
	path := writeDestinationsFile(t, `destinations:
  gateway: { url: "https://gateway.example/approve", retries: 3 }
routes:
  - match: { event_type: ApprovalRequested }
    to: [gateway, ledger]
`)
	dir := t.TempDir()
	out, errOut, code := cli(t, "", "relay", "--config", path, "--db", "sqlite://"+filepath.Join(dir, "x.db"))
	if code != 1 || out != "" {
		t.Fatalf("relay with a bad file: exit %d, stdout %q; want 1 and nothing", code, out)
	}
	for _, want := range []string{path + `:2: destination "gateway": unknown key "retries"`, path + `:5: route 1: to: "ledger" is not a destination`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.db")); err == nil {
		t.Errorf("the refused relay created the database")
	}
}
