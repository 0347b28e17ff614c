package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCLIRoutes: `outbox routes open|close` move a route's breaker by
// hand, `routes list` shows it with the audit rows naming the operator,
// on each database; bad input is refused with what to fix.
func TestCLIRoutes(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
			db := []string{"--db", dsn, "--table", table}
			if out := mustCLI(t, "", append([]string{"routes", "list"}, db...)...); !strings.Contains(out, "every route is CLOSED") {
				t.Errorf("routes list on a fresh outbox:\n%s", out)
			}
			out := mustCLI(t, "", append([]string{"routes", "open", "payment.events", "--actor", "alice", "--reason", "gateway maintenance"}, db...)...)
			if !strings.Contains(out, "route payment.events opened") {
				t.Errorf("routes open printed %q", out)
			}
			list := mustCLI(t, "", append([]string{"routes", "list"}, db...)...)
			for _, want := range []string{"payment.events", "OPEN", "never (opened by hand)", "operator:alice", "gateway maintenance"} {
				if !strings.Contains(list, want) {
					t.Errorf("routes list lacks %q:\n%s", want, list)
				}
			}
			mustCLI(t, "", append([]string{"routes", "close", "payment.events", "--actor", "bob"}, db...)...)
			var got struct {
				Routes []struct {
					Name, State string
					Forced      bool
				}
				Log []struct {
					Actor, From, To, Reason string
				}
			}
			if err := json.Unmarshal([]byte(mustCLI(t, "", append([]string{"routes", "list", "--json"}, db...)...)), &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Routes) != 1 || got.Routes[0].State != "CLOSED" || got.Routes[0].Forced {
				t.Errorf("routes after close = %+v", got.Routes)
			}
			if len(got.Log) != 2 || got.Log[0].Actor != "operator:bob" || got.Log[0].From != "OPEN" || got.Log[0].To != "CLOSED" ||
				got.Log[1].Actor != "operator:alice" || got.Log[1].To != "OPEN" {
				t.Errorf("audit rows = %+v", got.Log)
			}
			for _, bad := range [][]string{{"routes", "open", " "}, {"routes", "close", strings.Repeat("r", 401)}} {
				_, errOut, code := cli(t, "", append(bad, db...)...)
				if code == 0 || !strings.Contains(errOut, "route") {
					t.Errorf("%.30q: exit %d, stderr %q; want an error naming the route", bad, code, errOut)
				}
			}
		})
	}
}
