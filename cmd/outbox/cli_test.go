package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/txoutbox/outbox"
)

func TestCLIEnqueueStatusEvents(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
			if out := mustCLI(t, "", "migrate", "--db", dsn, "--table", table); !strings.Contains(out, "up to date") {
				t.Errorf("second migrate printed %q, want 'up to date'", out)
			}
			out := mustCLI(t, eventLines(3, 2, "66s"), "enqueue", "--db", dsn, "--table", table)
			ids := strings.Fields(out)
			if len(ids) != 3 {
				t.Fatalf("enqueue printed %q, want 3 event ids", out)
			}
			for _, id := range ids {
				if _, err := outbox.ParseEventID(id); err != nil {
					t.Fatalf("enqueue printed %q: %v", id, err)
				}
			}
			st := statusJSON(t, dsn, table)
			for _, s := range outbox.Statuses {
				if _, ok := st[string(s)]; !ok {
					t.Errorf("status --json lacks key %s: %v", s, st)
				}
			}
			if count(st, "PENDING") != 3 {
				t.Fatalf("status --json = %v, want 3 PENDING", st)
			}
			mustCLI(t, "", "relay", "--db", dsn, "--table", table, "--sink", "discard://", "--drain", "--poll-interval", "20ms")
			if st := statusJSON(t, dsn, table); count(st, "PROCESSED") != 3 || count(st, "PENDING") != 0 {
				t.Fatalf("after drain: %v", st)
			}
			show := mustCLI(t, "", "events", "show", ids[0], "--db", dsn, "--table", table)
			if !strings.Contains(show, "PROCESSED") || !strings.Contains(show, "DELIVERED") || !strings.Contains(show, "payment/tx-0") {
				t.Errorf("events show:\n%s", show)
			}
			var shown map[string]any
			if err := json.Unmarshal([]byte(mustCLI(t, "", "events", "show", ids[0], "--json", "--db", dsn, "--table", table)), &shown); err != nil {
				t.Fatal(err)
			}
			if atts, _ := shown["attempts"].([]any); len(atts) != 1 {
				t.Errorf("events show --json attempts = %v", shown["attempts"])
			}
			list := mustCLI(t, "", "events", "list", "--status", "processed", "--db", dsn, "--table", table)
			if strings.Count(list, "PROCESSED") != 3 {
				t.Errorf("events list --status processed:\n%s", list)
			}
			_, errOut, code := cli(t, "", "events", "retry", ids[0], "--db", dsn, "--table", table)
			if code == 0 || !strings.Contains(errOut, "PROCESSED") {
				t.Errorf("retry of a PROCESSED event: exit %d, %q", code, errOut)
			}
		})
	}
}

func TestCLIBadInput(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
			good := `{"aggregate_type":"payment","aggregate_id":"tx-1","event_type":"E","payload":{}}` + "\n"
			big := `{"aggregate_type":"payment","aggregate_id":"tx-1","event_type":"E","payload":"` + strings.Repeat("a", 2<<20) + `"}` + "\n"
			cases := []struct {
				name, input string
				args        []string
				want        string
			}{
				{"malformed JSON", good + `{"aggregate_type":"payment",` + "\n", nil, "line 2"},
				{"payload not JSON", good + good + `{"aggregate_type":"p","aggregate_id":"x","event_type":"E","payload":{bad}}` + "\n", nil, "line 3"},
				{"missing field", good + `{"aggregate_type":"payment","event_type":"E","payload":{}}` + "\n", nil, "aggregate_id: is required"},
				{"unknown field", `{"aggregate_type":"payment","aggregate_id":"x","event_type":"E","payload":{},"colour":1}` + "\n", nil, "unknown field"},
				{"oversized payload", good + big, nil, "line 2"},
				{"small limit", `{"aggregate_type":"payment","aggregate_id":"x","event_type":"E","payload":{"k":"0123456789"}}` + "\n", []string{"--max-payload-bytes", "8"}, "limit is 8 bytes"},
				{"bad ttl", `{"aggregate_type":"payment","aggregate_id":"x","event_type":"E","payload":{},"ttl":"soon"}` + "\n", nil, "ttl"},
				{"empty input", "\n\n", nil, "no events on stdin"},
				{"on_expired without a deadline", `{"aggregate_type":"payment","aggregate_id":"x","event_type":"E","payload":{},"on_expired":{"event_type":"ApprovalExpired"}}` + "\n", nil, "line 1: on_expired: needs a deadline"},
				{"on_expired not an object", `{"aggregate_type":"payment","aggregate_id":"x","event_type":"E","payload":{},"ttl":"66s","on_expired":"ApprovalExpired"}` + "\n", nil, "on_expired: must be an object"},
				{"on_expired unknown field", `{"aggregate_type":"payment","aggregate_id":"x","event_type":"E","payload":{},"ttl":"66s","on_expired":{"type":"X"}}` + "\n", nil, `unknown field "type"`},
				{"on_expired bad payload", `{"aggregate_type":"payment","aggregate_id":"x","event_type":"E","payload":{},"ttl":"66s","on_expired":{"event_type":"X","payload":"a\ud800"}}` + "\n", nil, "on_expired: payload"},
				// Invalid UTF-8 anywhere, and lone surrogate escapes, which a
				// JSON decoder would turn into U+FFFD (merging aggregates).
				{"aggregate id not UTF-8", good + "{\"aggregate_type\":\"payment\",\"aggregate_id\":\"tx-\xff\",\"event_type\":\"E\",\"payload\":{}}\n", nil, "line 2: aggregate_id: is not valid UTF-8"},
				{"aggregate id lone surrogate", `{"aggregate_type":"payment","aggregate_id":"tx-\udc00","event_type":"E","payload":{}}` + "\n", nil, "line 1: aggregate_id: holds a \\u escape of a lone UTF-16 surrogate"},
				{"aggregate type not UTF-8", "{\"aggregate_type\":\"pay\xe9\",\"aggregate_id\":\"x\",\"event_type\":\"E\",\"payload\":{}}\n", nil, "aggregate_type: is not valid UTF-8"},
				{"event type not UTF-8", "{\"aggregate_type\":\"p\",\"aggregate_id\":\"x\",\"event_type\":\"\xc3(\",\"payload\":{}}\n", nil, "event_type: is not valid UTF-8"},
				{"payload not UTF-8", "{\"aggregate_type\":\"p\",\"aggregate_id\":\"x\",\"event_type\":\"E\",\"payload\":{\"note\":\"caf\xe9\"}}\n", nil, "payload: is not valid UTF-8"},
				{"payload lone surrogate", `{"aggregate_type":"p","aggregate_id":"x","event_type":"E","payload":{"a":"\ud800"}}` + "\n", nil, "payload: contains the escape \\ud800"},
				{"header key not UTF-8", "{\"aggregate_type\":\"p\",\"aggregate_id\":\"x\",\"event_type\":\"E\",\"payload\":{},\"headers\":{\"x-\xff\":\"v\"}}\n", nil, "headers: a key is not valid UTF-8"},
				{"header value not UTF-8", "{\"aggregate_type\":\"p\",\"aggregate_id\":\"x\",\"event_type\":\"E\",\"payload\":{},\"headers\":{\"trace\":\"\xff\"}}\n", nil, `headers: value of "trace" is not valid UTF-8`},
			}
			for _, tc := range cases {
				args := append([]string{"enqueue", "--db", dsn, "--table", table}, tc.args...)
				out, errOut, code := cli(t, tc.input, args...)
				if code == 0 || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
					t.Errorf("%s: exit %d, stdout %q, stderr %q; want one error line containing %q", tc.name, code, out, errOut, tc.want)
				}
			}
			if st := statusJSON(t, dsn, table); count(st, "PENDING") != 0 {
				t.Fatalf("refused batches wrote events: %v", st)
			}
			_, errOut, code := cli(t, "", "status", "--db", dsn, "--table", "x; drop table y")
			if code != 2 || !strings.Contains(errOut, "not allowed") {
				t.Errorf("SQL-ish table name: exit %d, %q", code, errOut)
			}
			_, errOut, code = cli(t, "", "events", "list", "--status", "LOST", "--db", dsn, "--table", table)
			if code != 2 || !strings.Contains(errOut, "unknown status") {
				t.Errorf("unknown status: exit %d, %q", code, errOut)
			}
			_, errOut, code = cli(t, "", "relay", "--db", dsn, "--table", table, "--sink", "discard://", "--fifo-share", "0")
			if code != 2 || !strings.Contains(errOut, "--fifo-share must be above 0") {
				t.Errorf("bad --fifo-share: exit %d, %q", code, errOut)
			}
			_, errOut, code = cli(t, "", "relay", "--db", dsn, "--table", table, "--sink", "ftp://example")
			if code != 2 || !strings.Contains(errOut, "unsupported sink") {
				t.Errorf("bad sink: exit %d, %q", code, errOut)
			}
		})
	}
}

func TestCLISecretsNeverPrinted(t *testing.T) {
	const pw = "Sup3rSecretPw"
	cases := [][]string{
		{"status", "--db", "postgres://app:" + pw + "@127.0.0.1:1/db"},
		{"status", "--db", "postgres://app:" + pw + "@127.0.0.1:5432/no_such_db"},
		{"status", "--db", "postgres://app:" + pw + "@[bad"},
		{"status", "--db", "host=127.0.0.1 port=1 user=app password=" + pw},
		{"status", "--db", "mongodb://app:" + pw + "@127.0.0.1/db"},
		{"relay", "--db", "postgres://app:" + pw + "@127.0.0.1:1/db", "--sink", "http://u:" + pw + "@127.0.0.1:1/x", "--drain", "--start-wait", "1s"},
	}
	for _, args := range cases {
		out, errOut, code := cli(t, "", args...)
		if code == 0 {
			t.Errorf("outbox %v succeeded; want an error", args[:1])
		}
		if strings.Contains(out+errOut, pw) {
			t.Errorf("outbox %s printed the password:\n%s%s", args[0], out, errOut)
		}
		if strings.TrimSpace(errOut) == "" {
			t.Errorf("outbox %v: no error message", args)
		}
	}
	t.Setenv("OUTBOX_DB", "postgres://app:"+pw+"@127.0.0.1:1/db")
	_, errOut, code := cli(t, "", "status")
	if code == 0 || strings.Contains(errOut, pw) || !strings.Contains(errOut, "127.0.0.1") {
		t.Errorf("OUTBOX_DB: exit %d, %q", code, errOut)
	}
}

func TestCLIEnvironmentVariables(t *testing.T) {
	dsn := backends()[1].dsn(t)
	table := newTable()
	t.Setenv("OUTBOX_DB", dsn)
	t.Setenv("OUTBOX_TABLE", table)
	mustCLI(t, "", "migrate")
	mustCLI(t, eventLines(2, 1, ""), "enqueue")
	t.Setenv("OUTBOX_SINK", "discard://")
	t.Setenv("OUTBOX_DRAIN", "true")
	t.Setenv("OUTBOX_POLL_INTERVAL", "10ms")
	mustCLI(t, "", "relay")
	if st := statusJSON(t, dsn, table); count(st, "PROCESSED") != 2 {
		t.Fatalf("relay configured by environment: %v", st)
	}
	t.Setenv("OUTBOX_BATCH", "not-a-number")
	if _, errOut, code := cli(t, "", "relay"); code != 2 || !strings.Contains(errOut, "OUTBOX_BATCH") && !strings.Contains(errOut, "batch") {
		t.Errorf("bad OUTBOX_BATCH: exit %d, %q", code, errOut)
	}
	_ = os.Getenv
}

func TestRedactDriverDSN(t *testing.T) {
	s := &secrets{}
	s.addURL("app:Pa55w0rd!x@tcp(127.0.0.1:3306)/pay?parseTime=true")
	if got := s.redact("dial app:Pa55w0rd!x@tcp(127.0.0.1:3306)/pay failed"); strings.Contains(got, "Pa55w0rd") {
		t.Fatalf("driver DSN password not redacted: %s", got)
	}
}

// One environment variable names one flag: walking the whole command tree,
// no OUTBOX_* variable sets two flags (a default variable per flag once
// gave OUTBOX_STATUS to migrate --status, events list --status and events
// purge --status, and OUTBOX_JSON, OUTBOX_TTL alike).
func TestEnvVarsNameOneFlagEach(t *testing.T) {
	parser, err := newParser(&CLI{}, io.Discard, io.Discard, func(int) {})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			for _, env := range f.Envs {
				if env == "-" { // kong's "no variable"
					continue
				}
				where := strings.TrimSpace(n.FullPath() + " --" + f.Name)
				if prev, dup := owner[env]; dup {
					t.Errorf("%s sets both %s and %s", env, prev, where)
				}
				owner[env] = where
				if !strings.HasPrefix(env, "OUTBOX_") || strings.HasPrefix(env, "OUTBOX_TEST_") {
					t.Errorf("%s (for %s) is not an OUTBOX_* setting", env, where)
				}
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(parser.Model.Node)
	for _, env := range []string{"OUTBOX_DB", "OUTBOX_TABLE", "OUTBOX_LOG_LEVEL", "OUTBOX_LOG_FORMAT", "OUTBOX_SINK", "OUTBOX_BATCH", "OUTBOX_DRAIN", "OUTBOX_ON_FAILURE"} {
		if owner[env] == "" {
			t.Errorf("%s sets no flag", env)
		}
	}
	for _, env := range []string{"OUTBOX_STATUS", "OUTBOX_JSON", "OUTBOX_TTL", "OUTBOX_DOWN", "OUTBOX_YES"} {
		if owner[env] != "" {
			t.Errorf("%s sets %s; it must set nothing", env, owner[env])
		}
	}
}

// A variable meant for one command does not change another:
// OUTBOX_STATUS=true leaves `outbox migrate` a migration, and OUTBOX_JSON
// leaves `outbox status` printing text.
func TestEnvVarsOfOtherCommandsIgnored(t *testing.T) {
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "outbox.db")
	t.Setenv("OUTBOX_STATUS", "true")
	t.Setenv("OUTBOX_JSON", "true")
	t.Setenv("OUTBOX_TTL", "1s")
	out := mustCLI(t, "", "migrate", "--db", dsn)
	if !strings.Contains(out, "applied") {
		t.Fatalf("migrate with OUTBOX_STATUS=true printed %q, want the migrations applied", out)
	}
	st := mustCLI(t, "", "status", "--db", dsn)
	if json.Valid([]byte(st)) {
		t.Fatalf("status with OUTBOX_JSON=true printed JSON: %s", st)
	}
	// The tables exist: an enqueue and a JSON status work.
	mustCLI(t, eventLines(1, 1, ""), "enqueue", "--db", dsn)
	if n := count(statusJSON(t, dsn, "outbox_events"), "PENDING"); n != 1 {
		t.Fatalf("after migrate and enqueue: %d PENDING, want 1", n)
	}
}

// Redaction masks a secret where it stands as one, not every occurrence
// of its text: with the password "postgres", backend=postgres stays, and
// the option routing_key is a routing template, not a key.
func TestRedactSecretsWhereTheyStand(t *testing.T) {
	s := &secrets{}
	s.addURL("postgres://postgres:postgres@127.0.0.1:5432/test?sslmode=disable")
	s.addURL("amqp://guest:gu3st-Pw@127.0.0.1:5672/?exchange=outbox&routing_key={aggregate_type}.events")
	s.addURL("postgres://app:p@ss/w0rd#1@db:5432/pay") // does not parse as a URL
	cases := []struct{ in, want string }{
		{"relay configured backend=postgres table=outbox_events", "relay configured backend=postgres table=outbox_events"},
		{`dial postgres://postgres:postgres@127.0.0.1:5432/test failed`, `dial postgres://postgres:xxxxx@127.0.0.1:5432/test failed`},
		{"sink=amqp://guest:gu3st-Pw@127.0.0.1:5672/?exchange=outbox&routing_key=payment.events",
			"sink=amqp://guest:xxxxx@127.0.0.1:5672/?exchange=outbox&routing_key=payment.events"},
		{"connect postgres://app:p@ss/w0rd#1@db:5432/pay: refused", "connect postgres://app:xxxxx@db:5432/pay: refused"},
		{"host=db user=app password=s3cret-kv dbname=pay", "host=db user=app password=xxxxx dbname=pay"},
		{"host=db password='with space' dbname=pay", "host=db password=xxxxx dbname=pay"},
		{`POST https://hooks.example/x?token=t0k3n&sign_secret_env=GATEWAY_SECRET failed`, `POST https://hooks.example/x?token=xxxxx&sign_secret_env=GATEWAY_SECRET failed`},
		{"amqp keyfile=/etc/outbox/client.pem heartbeat=10s", "amqp keyfile=/etc/outbox/client.pem heartbeat=10s"},
		{"dial app:Pa55w0rd!x@tcp(127.0.0.1:3306)/pay failed", "dial app:xxxxx@tcp(127.0.0.1:3306)/pay failed"},
		{"redis://:r3dis-pw@127.0.0.1:6379/0 down", "redis://:xxxxx@127.0.0.1:6379/0 down"},
	}
	for _, c := range cases {
		if got := s.redact(c.in); got != c.want {
			t.Errorf("redact(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
	}
	for raw, want := range map[string]string{
		"amqp://guest:guest@h:5672/?exchange=outbox&routing_key=%7Baggregate_type%7D.events": "amqp://guest:xxxxx@h:5672/?exchange=outbox&routing_key=%7Baggregate_type%7D.events",
		"https://h/x?sign_secret_env=GW&token=abc":                                           "https://h/x?sign_secret_env=GW&token=xxxxx",
	} {
		if got := redactURL(raw); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", raw, got, want)
		}
	}
	// Through the logger, in both formats.
	for _, format := range []string{"text", "json"} {
		var b strings.Builder
		newLogger(&b, "info", format, s).Info("relay configured", "backend", "postgres",
			"err", "dial postgres://postgres:postgres@127.0.0.1:5432/test: refused")
		if out := b.String(); strings.Contains(out, ":postgres@") || !strings.Contains(out, "postgres") || !strings.Contains(out, "xxxxx") {
			t.Errorf("%s log line: %s", format, out)
		}
	}
}
