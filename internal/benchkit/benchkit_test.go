package benchkit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox/internal/benchkit"
	"github.com/txoutbox/outbox/internal/testenv"
	"github.com/txoutbox/outbox/relay"
)

func TestEventPayload(t *testing.T) {
	t.Parallel()
	for _, seq := range []int64{0, 7, 123456, 1 << 40} {
		ev := benchkit.NewEvent(seq, 100)
		if len(ev.Payload) != benchkit.PayloadSize {
			t.Errorf("seq %d: payload is %d bytes, want %d: %s", seq, len(ev.Payload), benchkit.PayloadSize, ev.Payload)
		}
		if !json.Valid(ev.Payload) {
			t.Errorf("seq %d: payload is not JSON: %s", seq, ev.Payload)
		}
		if got := benchkit.Seq(ev.Payload); got != seq {
			t.Errorf("Seq(%s) = %d, want %d", ev.Payload, got, seq)
		}
		if want := fmt.Sprintf("pay-%d", seq%100); ev.Aggregate != want {
			t.Errorf("seq %d: aggregate %q, want %q", seq, ev.Aggregate, want)
		}
	}
	if got := benchkit.Seq([]byte(`{"seq": 42, "note": "x"}`)); got != 42 {
		t.Errorf("Seq of a jsonb-printed payload = %d, want 42", got)
	}
	if got := benchkit.Seq([]byte(`{"other":1}`)); got != -1 {
		t.Errorf("Seq of a foreign payload = %d, want -1", got)
	}
}

// TestScenariosSmoke runs every scenario at a tiny size against a real
// PostgreSQL, so that CI notices when the benchmark no longer runs. It
// measures nothing worth reading.
func TestScenariosSmoke(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres.Addr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("outbox_bench_test_%d_", os.Getpid())
	var progress bytes.Buffer
	rep, err := benchkit.Run(ctx, benchkit.Config{
		DSN:        dsn,
		Scenarios:  []string{benchkit.ScenarioDrain, benchkit.ScenarioSteady, benchkit.ScenarioLatency, benchkit.ScenarioGateway},
		Events:     300,
		Aggregates: 10,
		Producers:  2,
		// 2 s, not less: on a loaded machine a producer may commit
		// nothing in a few hundred milliseconds, and steady needs a rate.
		Duration:     2 * time.Second,
		Rates:        []int{100},
		Runs:         1,
		Batch:        100,
		SchemaPrefix: prefix,
		// Two relays at once against a gateway that takes 1ms per request.
		GatewayEvents: 200,
		GatewayDelay:  time.Millisecond,
		Relays:        []int{2},
		Progress:      func(s string) { progress.WriteString(s + "\n") },
	},
		benchkit.Contender{System: &benchkit.Outbox{Relay: relay.Config{PollInterval: 20 * time.Millisecond}}, Role: benchkit.Self},
		benchkit.Contender{System: &benchkit.Outbox{Label: "outbox poll-only", Wakeups: benchkit.WakePoll, Relay: relay.Config{PollInterval: 20 * time.Millisecond}},
			Role: benchkit.Peer, Scenarios: []string{benchkit.ScenarioLatency}},
		benchkit.Contender{System: &benchkit.BareSQL{}, Role: benchkit.Reference, Scenarios: []string{benchkit.ScenarioDrain}},
	)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("progress:\n%s\n%s", progress.String(), table.String())
	want := map[string]int{benchkit.ScenarioDrain: 2, benchkit.ScenarioSteady: 1, benchkit.ScenarioLatency: 2, benchkit.ScenarioGateway: 1}
	got := map[string]int{}
	for _, r := range rep.Results {
		got[r.Scenario]++
		if r.Err != "" {
			t.Errorf("%s %s: %s", r.Scenario, r.System, r.Err)
			continue
		}
		switch r.Scenario {
		case benchkit.ScenarioDrain:
			if r.EventsPerSec <= 0 || r.Duplicates != 0 {
				t.Errorf("drain %s: %.0f events/s, %d duplicates", r.System, r.EventsPerSec, r.Duplicates)
			}
			// Every delivered event changes its row: outbox marks it
			// PROCESSED (an update; what it deletes are claim records, one
			// per batch), the bare loop deletes it.
			switch v := r.RowVersions; {
			case v == nil:
				t.Errorf("drain %s: no row versions counted", r.System)
			case r.Role == benchkit.Self && (v.Updates < 1 || v.Deletes >= 1):
				t.Errorf("drain %s: row versions per event %+v, want at least one update and fewer deletes than events", r.System, *v)
			case r.Role == benchkit.Reference && (v.Deletes < 1 || v.Written() != 0):
				t.Errorf("drain %s: row versions per event %+v, want one delete and nothing written", r.System, *v)
			}
		case benchkit.ScenarioSteady:
			if r.TxPerSec <= 0 || r.BaselineTxPerSec <= 0 || r.Share <= 0 {
				t.Errorf("steady %s: %+v", r.System, r)
			}
		case benchkit.ScenarioGateway:
			// Two relays must still keep each aggregate's order.
			if r.Relays != 2 || r.EventsPerSec <= 0 || r.OrderViolations != 0 {
				t.Errorf("gateway %s: %d relays, %.0f events/s, %d order violations", r.System, r.Relays, r.EventsPerSec, r.OrderViolations)
			}
		case benchkit.ScenarioLatency:
			if r.Produced == 0 || r.Delivered != r.Produced || r.Max < r.P99 {
				t.Errorf("latency %s: produced %d, delivered %d, p99 %s", r.System, r.Produced, r.Delivered, r.P99)
			}
		}
	}
	for s, n := range want {
		if got[s] != n {
			t.Errorf("%d %s rows, want %d", got[s], s, n)
		}
	}
	if !strings.Contains(table.String(), "DRAIN") || !strings.Contains(table.String(), "LATENCY") || !strings.Contains(table.String(), "GATEWAY") {
		t.Errorf("table lacks a section:\n%s", table.String())
	}
	// The schemas are gone.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1`, prefix+"%").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d schemas left behind", left)
	}
}
