package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

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
