package main

import (
	"encoding/json"
	"testing"
)

// TestCLIRoutesOpensPersists: the OPENS of `routes list` counts a route's
// openings for good, on each database: closing the breaker keeps the
// count, the next opening adds one (it once went back to 0 on close).
// The relay's own openings and closings are covered by the relay
// package's TestBreakerOpensCountPersists.
func TestCLIRoutesOpensPersists(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			mustCLI(t, "", "migrate", "--db", dsn, "--table", table)
			db := []string{"--db", dsn, "--table", table}
			opens := func() int {
				var got struct {
					Routes []struct {
						Name  string
						Opens int
					}
				}
				if err := json.Unmarshal([]byte(mustCLI(t, "", append([]string{"routes", "list", "--json"}, db...)...)), &got); err != nil {
					t.Fatal(err)
				}
				if len(got.Routes) != 1 || got.Routes[0].Name != "payment.events" {
					t.Fatalf("routes = %+v, want payment.events alone", got.Routes)
				}
				return got.Routes[0].Opens
			}
			for i, step := range []struct {
				verb string
				want int
			}{{"open", 1}, {"close", 1}, {"open", 2}, {"close", 2}} {
				mustCLI(t, "", append([]string{"routes", step.verb, "payment.events", "--actor", "alice"}, db...)...)
				if got := opens(); got != step.want {
					t.Errorf("step %d, after routes %s: OPENS %d, want %d", i+1, step.verb, got, step.want)
				}
			}
		})
	}
}
