package sqladmin

import (
	"strings"
	"testing"

	"github.com/txoutbox/outbox/store/internal/dialect"
)

func TestRenderQuotesTablesAndNumbersPlaceholders(t *testing.T) {
	d := dialect.Dialect{
		Dollar:   true,
		Quote:    `"`,
		Now:      "now()",
		Ago:      func(m string) string { return "now() - " + m },
		Text:     func(c string) string { return c + "::text" },
		Minute:   func(c string) string { return "date_trunc('minute', " + c + ")" },
		UpsertOn: "ON CONFLICT (%s) DO UPDATE SET",
		Excluded: "excluded.%s",
	}
	n := names{d: d, Q: d.Quote, Outbox: "ob", Relays: "ob_relays", Attempts: "ob_attempts", Now: d.Now}
	r := render(n)
	for name, want := range map[string][]string{
		r.chainHeads:       {`FROM "ob" f`, "f.id, f.event_id::text, f.aggregate_type", "LIMIT $1"},
		r.chainEvents:      {`FROM "ob" WHERE status = 'BLOCKED'`, "id > $3", "LIMIT $4"},
		r.throughput:       {`FROM "ob_attempts"`, "now() - $1"},
		r.publishDurations: {`FROM "ob_attempts"`, "finished_at > now() - $1", "ORDER BY finished_at DESC LIMIT $2"},
		r.heartbeat:        {`INSERT INTO "ob_relays"`, "$3, now(), $4", "ON CONFLICT (relay_id) DO UPDATE SET heartbeat_at = now(), host = excluded.host"},
		r.removeRelay:      {`DELETE FROM "ob_relays" WHERE relay_id = $1`},
	} {
		for _, w := range want {
			if !strings.Contains(name, w) {
				t.Errorf("%q lacks %q", name, w)
			}
		}
	}
	n.DeliveredOnRow, n.Integer = true, "SIGNED"
	if got := render(n).throughput; !strings.Contains(got, `UNION ALL SELECT date_trunc('minute', delivered_finished_at), 'DELIVERED'`) ||
		!strings.Contains(got, "now() - $2") || !strings.Contains(got, "AS SIGNED)") {
		t.Errorf("throughput with deliveries on the row: %s", got)
	}
	if got := render(n).publishDurations; !strings.Contains(got, "delivered_finished_at > now() - $3") ||
		!strings.Contains(got, "ORDER BY delivered_finished_at DESC LIMIT $4") || !strings.Contains(got, "ORDER BY f DESC LIMIT $5") {
		t.Errorf("publish durations with deliveries on the row: %s", got)
	}
	n.DeliveredOnRow, n.Deliveries = false, "ob_deliveries"
	if got := render(n).publishDurations; !strings.Contains(got, `delivered AS n FROM "ob_deliveries"`) || !strings.Contains(got, "completed_at > now() - $3") ||
		!strings.Contains(got, "ORDER BY completed_at DESC LIMIT $4") || !strings.Contains(got, "ORDER BY f DESC LIMIT $5") {
		t.Errorf("publish durations with the deliveries table: %s", got)
	}
	n.IDs = "$1, $2"
	got, err := statements.RenderNamed("statements.blocked_behind", n)
	if err != nil || !strings.Contains(got, "h.id IN ($1, $2)") {
		t.Errorf("blocked_behind: %q, %v", got, err)
	}
}
