package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCLIRetryByFilter: the casualties of a gateway's 503s are requeued
// by filter, after a dry run that counts them; the 400s stay FAILED; bad
// filters are refused with what to fix.
func TestCLIRetryByFilter(t *testing.T) {
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p struct{ Agg int }
		_ = json.Unmarshal(body, &p)
		if p.Agg%2 == 0 {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		http.Error(w, "card number is invalid", http.StatusBadRequest)
	}))
	t.Cleanup(gw.Close)
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			db := []string{"--db", dsn, "--table", table}
			mustCLI(t, "", append([]string{"migrate"}, db...)...)
			ids := strings.Fields(mustCLI(t, eventLines(4, 4, ""), append([]string{"enqueue"}, db...)...))
			mustCLI(t, "", append([]string{"relay", "--sink", gw.URL, "--drain", "--max-retries", "0", "--poll-interval", "20ms"}, db...)...)
			if st := statusJSON(t, dsn, table); count(st, "FAILED") != 4 {
				t.Fatalf("after the relay: %v, want 4 FAILED", st)
			}
			retry := func(args ...string) (string, string, int) {
				return cli(t, "", append(append([]string{"events", "retry"}, args...), db...)...)
			}
			// "%status 503%", not "%503%": the error names the event, and
			// an event id holds "503" about once in 140, which would let a
			// 400's error match too.
			out, errOut, code := retry("--status", "failed", "--error-like", "%status 503%", "--since", "1h", "--dry-run")
			if code != 0 || !strings.HasPrefix(out, "2 events match") {
				t.Fatalf("dry run: exit %d, %q %q; want 2 events match", code, out, errOut)
			}
			if st := statusJSON(t, dsn, table); count(st, "FAILED") != 4 {
				t.Fatalf("the dry run changed something: %v", st)
			}
			out, errOut, code = retry("--status", "FAILED", "--error-like", "%status 503%", "--since", "1h", "--actor", "ops", "--reason", "gateway maintenance")
			if code != 0 || !strings.HasPrefix(out, "requeued 2 events") {
				t.Fatalf("retry by filter: exit %d, %q %q", code, out, errOut)
			}
			if st := statusJSON(t, dsn, table); count(st, "FAILED") != 2 || count(st, "PENDING") != 2 {
				t.Fatalf("after the retry: %v, want 2 FAILED (the 400s) and 2 PENDING", st)
			}
			show := mustCLI(t, "", append([]string{"events", "show", ids[0]}, db...)...)
			if !strings.Contains(show, "REQUEUED") || !strings.Contains(show, "gateway maintenance") || !strings.Contains(show, "bulk retry") {
				t.Errorf("the audit trail of a requeued event:\n%s", show)
			}
			for _, tc := range []struct {
				args []string
				want string
			}{
				{nil, "--status FAILED"},
				{[]string{ids[1], "--status", "FAILED"}, "not both"},
				{[]string{"--status", "FAILED", "--since", "yesterday"}, "RFC 3339"},
				{[]string{"--status", "PENDING"}, "use FAILED or EXPIRED"},
				{[]string{"--status", "FAILED", "--since", "1h", "--until", "2h"}, "is not before"},
			} {
				out, errOut, code := retry(tc.args...)
				if code == 0 || !strings.Contains(errOut, tc.want) {
					t.Errorf("events retry %v: exit %d, %q %q; want an error containing %q", tc.args, code, out, errOut, tc.want)
				}
			}
		})
	}
}
