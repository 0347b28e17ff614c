package main

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestCLIReplayAggregate: after a relay delivered the events of two
// aggregates, `events replay --aggregate-id` sends one aggregate's events
// again, with the same ids and in order, and leaves the other alone; the
// dry run before counts them and changes nothing; the log and the audit
// trail name the operator and the reason; bad flags are refused with what
// to fix.
func TestCLIReplayAggregate(t *testing.T) {
	for _, bc := range backends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			dsn, table := bc.dsn(t), newTable()
			db := []string{"--db", dsn, "--table", table}
			gw := &gateway{}
			srv := httptest.NewServer(gw)
			t.Cleanup(srv.Close)
			drain := func() {
				t.Helper()
				mustCLI(t, "", append([]string{"relay", "--sink", srv.URL + "/approve", "--drain", "--poll-interval", "20ms"}, db...)...)
			}
			mustCLI(t, "", append([]string{"migrate"}, db...)...)
			ids := strings.Fields(mustCLI(t, eventLines(6, 2, ""), append([]string{"enqueue"}, db...)...))
			if len(ids) != 6 {
				t.Fatalf("enqueue printed %v, want 6 ids", ids)
			}
			x := []string{ids[0], ids[2], ids[4]} // payment/tx-0, in order
			drain()
			if rs, _ := gw.snapshot(); len(rs) != 6 {
				t.Fatalf("the gateway received %d events, want 6", len(rs))
			}
			replay := func(args ...string) (string, string, int) {
				return cli(t, "", append(append([]string{"events", "replay"}, args...), db...)...)
			}
			target := []string{"--aggregate-type", "payment", "--aggregate-id", "tx-0", "--actor", "ops", "--reason", "ledger rebuilt"}

			out, errOut, code := replay(append(target, "--dry-run")...)
			if code != 0 || !strings.HasPrefix(out, "3 events of 1 aggregates would be replayed") {
				t.Fatalf("dry run: exit %d, %q %q; want 3 events of 1 aggregate", code, out, errOut)
			}
			for _, want := range []string{"replay dry run", "ops", "ledger rebuilt", "aggregate payment/tx-0"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("the dry run's log %q does not name %q", errOut, want)
				}
			}
			if st := statusJSON(t, dsn, table); count(st, "PROCESSED") != 6 {
				t.Fatalf("the dry run changed something: %v", st)
			}
			if show := mustCLI(t, "", append([]string{"events", "show", x[0]}, db...)...); strings.Contains(show, "REPLAYED") {
				t.Fatalf("the dry run wrote an audit row:\n%s", show)
			}
			// The dry run is in the audit log (a chained note), and so is
			// the replay below.
			notes := func() int {
				t.Helper()
				var r struct {
					ByKind map[string]int `json:"by_kind"`
				}
				if err := json.Unmarshal([]byte(mustCLI(t, "", append([]string{"audit", "verify", "--json"}, db...)...)), &r); err != nil {
					t.Fatal(err)
				}
				return r.ByKind["note"]
			}
			if n := notes(); n != 1 {
				t.Fatalf("audit log notes after the dry run: %d, want its record", n)
			}

			if out, errOut, code := replay(target...); code == 0 || !strings.Contains(errOut, "--yes") {
				t.Fatalf("a replay without --yes: exit %d, %q %q; want a refusal naming --yes", code, out, errOut)
			}
			out, errOut, code = replay(append(target, "--yes", "--json")...)
			var res struct {
				DryRun     bool  `json:"dry_run"`
				Events     int64 `json:"events"`
				Aggregates int64 `json:"aggregates"`
				Held       []any `json:"held"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.DryRun || res.Events != 3 || res.Aggregates != 1 || len(res.Held) != 0 {
				t.Fatalf("replay --json: exit %d, %q %q; want 3 events of 1 aggregate replayed", code, out, errOut)
			}
			if st := statusJSON(t, dsn, table); count(st, "PROCESSED") != 3 || count(st, "PENDING") != 3 {
				t.Fatalf("after the replay: %v, want tx-0's 3 events PENDING and tx-1's PROCESSED", st)
			}
			if n := notes(); n != 2 {
				t.Fatalf("audit log notes after the replay: %d, want the dry run's and the replay's", n)
			}

			drain()
			rs, _ := gw.snapshot()
			var again []string
			for _, r := range rs[6:] {
				again = append(again, r.eventID)
			}
			if !slices.Equal(again, x) {
				t.Fatalf("delivered after the replay: %v, want tx-0's events %v with the same ids, in order, and nothing of tx-1", again, x)
			}
			show := mustCLI(t, "", append([]string{"events", "show", x[0]}, db...)...)
			if strings.Count(show, " DELIVERED ") != 2 || !strings.Contains(show, "REPLAYED") || !strings.Contains(show, "operator:ops") ||
				!strings.Contains(show, "ledger rebuilt") {
				t.Errorf("the audit trail of a replayed event (want both deliveries and the replay by ops with its reason):\n%s", show)
			}

			for _, tc := range []struct {
				args []string
				want string
			}{
				{[]string{"--reason", "x", "--dry-run"}, "say which delivered events"},
				{[]string{"--aggregate-type", "payment", "--dry-run"}, "--reason"},
				{[]string{"--aggregate-id", "tx-0", "--reason", "x", "--dry-run"}, "needs its --aggregate-type"},
				{[]string{"--type", "A", "--since", "yesterday", "--reason", "x", "--dry-run"}, "RFC 3339"},
				{[]string{"--type", "A", "--since", "1h", "--until", "2h", "--reason", "x", "--dry-run"}, "is not before"},
			} {
				out, errOut, code := replay(tc.args...)
				if code == 0 || !strings.Contains(errOut, tc.want) {
					t.Errorf("events replay %v: exit %d, %q %q; want an error containing %q", tc.args, code, out, errOut, tc.want)
				}
			}
		})
	}
}

// TestCLIReplayAtOneDestination: with a destinations file, a replay acts
// on one destination's table only (--destination): the gateway gets the
// aggregate's events again, the other destination's copies are left alone;
// without --destination the replay is refused.
func TestCLIReplayAtOneDestination(t *testing.T) {
	dsn, table := postgresDSN(t), newTable()
	gw := &gateway{}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	kafka := newKafka(t)
	file := fanOutFile(t, srv.URL, kafka.ListenAddrs()[0])
	db := []string{"--db", dsn, "--table", table, "--config", file}
	relay := func() {
		t.Helper()
		mustCLI(t, "", append([]string{"relay", "--drain", "--poll-interval", "10ms", "--progress", "0"}, db...)...)
	}
	mustCLI(t, "", append([]string{"migrate"}, db...)...)
	ids := strings.Fields(mustCLI(t, approvalLines(0, 4, 2), "enqueue", "--db", dsn, "--table", table))
	relay()
	if rs, _ := gw.snapshot(); len(rs) != 4 {
		t.Fatalf("the gateway received %d events, want 4", len(rs))
	}
	replay := append([]string{"events", "replay", "--aggregate-type", "payment", "--aggregate-id", "tx-0", "--reason", "gateway lost them", "--yes"}, db...)
	if out, errOut, code := cli(t, "", replay...); code == 0 || !strings.Contains(errOut, "--destination") {
		t.Fatalf("a replay with --config and no --destination: exit %d, %q %q; want a refusal naming --destination", code, out, errOut)
	}
	if out := mustCLI(t, "", append(replay, "--destination", "gateway")...); !strings.HasPrefix(out, "replayed 2 events of 1 aggregates") {
		t.Fatalf("replay at the gateway: %q", out)
	}
	if st := statusJSON(t, dsn, table+"_to_events"); count(st, "PROCESSED") != 4 {
		t.Fatalf("the other destination's table: %v, want untouched (4 PROCESSED)", st)
	}
	relay()
	rs, _ := gw.snapshot()
	var again []string
	for _, r := range rs[4:] {
		again = append(again, r.eventID)
	}
	if want := []string{ids[0], ids[2]}; !slices.Equal(again, want) {
		t.Fatalf("the gateway received after the replay %v, want tx-0's events %v in order", again, want)
	}
	show := func(dest string) string {
		return mustCLI(t, "", append([]string{"events", "show", ids[0], "--destination", dest}, db...)...)
	}
	if s := show("gateway"); !strings.Contains(s, "REPLAYED") || !strings.Contains(s, "gateway lost them") {
		t.Errorf("the gateway's copy has no replay in its trail:\n%s", s)
	}
	if s := show("events"); strings.Contains(s, "REPLAYED") {
		t.Errorf("the other destination's copy was replayed:\n%s", s)
	}
}
