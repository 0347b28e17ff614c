package sqladmin

import (
	"fmt"

	"github.com/txoutbox/outbox/internal/sqltext"
)

// statements are the admin queries, in the template syntax of the
// backends' queries and migrations: {{.Q}} is the dialect's identifier
// quote around the validated table names {{.Outbox}}, {{.Relays}} and
// {{.Attempts}}; {{.P n}} is the dialect's n-th placeholder, and {{.Now}},
// {{.Ago n}}, {{.Text col}}, {{.Minute col}} and {{.Upsert}} are its fixed
// fragments. Every value is a bind parameter. The statements whose WHERE
// comes from a filter are heads here; the filter's conditions follow them.
var statements = sqltext.MustParse("sqladmin", `
{{define "summary"}}{{.Pre}}id, {{.Text (print .Pre "event_id")}}, {{.Pre}}aggregate_type, {{.Pre}}aggregate_id, {{.Pre}}event_type, {{.Status .Pre}},
		{{.Pre}}retry_count, {{.Pre}}created_at, {{.Pre}}processed_at, {{.Pre}}available_at, {{.Pre}}expires_at, {{.Pre}}last_error{{end}}

{{define "events"}}SELECT {{template "summary" .}} FROM {{.Q}}{{.Outbox}}{{.Q}}{{end}}

{{define "match"}}SELECT id, {{.Text "event_id"}}, {{.Status ""}}, expires_at FROM {{.Q}}{{.Outbox}}{{.Q}}{{end}}

{{define "blocked_behind"}}SELECT count(*), SUM(CASE WHEN b.expires_at <= {{.Now}} THEN 1 ELSE 0 END)
		FROM {{.Q}}{{.Outbox}}{{.Q}} b WHERE {{.Held}}b.status = 'BLOCKED' AND EXISTS (SELECT 1 FROM {{.Q}}{{.Outbox}}{{.Q}} h
			WHERE h.id IN ({{.IDs}}) AND h.aggregate_type = b.aggregate_type
			  AND h.aggregate_id = b.aggregate_id AND h.id < b.id){{end}}

{{define "failed"}}{{template "events" .}} WHERE {{.Held}}status = 'FAILED' ORDER BY id LIMIT {{.P 1}}{{end}}

{{define "chain_heads"}}SELECT {{template "summary" .Prefixed "f."}} FROM {{.Q}}{{.Outbox}}{{.Q}} f
		WHERE {{.Held}}f.status = 'FAILED'
		  AND EXISTS (SELECT 1 FROM {{.Q}}{{.Outbox}}{{.Q}} b WHERE {{.Held}}b.status = 'BLOCKED' AND b.aggregate_type = f.aggregate_type
					  AND b.aggregate_id = f.aggregate_id AND b.id > f.id)
		  AND NOT EXISTS (SELECT 1 FROM {{.Q}}{{.Outbox}}{{.Q}} e WHERE {{.Held}}e.status = 'FAILED' AND e.aggregate_type = f.aggregate_type
					  AND e.aggregate_id = f.aggregate_id AND e.id < f.id)
		ORDER BY f.id LIMIT {{.P 1}}{{end}}

{{define "chain_where"}} FROM {{.Q}}{{.Outbox}}{{.Q}} WHERE {{.Held}}status = 'BLOCKED' AND aggregate_type = {{.P 1}}
		AND aggregate_id = {{.P 2}} AND id > {{.P 3}}{{end}}

{{define "chain_count"}}SELECT count(*){{template "chain_where" .}}{{end}}

{{define "chain_events"}}SELECT {{template "summary" .}}{{template "chain_where" .}} ORDER BY id LIMIT {{.P 4}}{{end}}

{{define "throughput"}}
{{- if .Deliveries -}}
SELECT m, outcome, CAST(sum(n) AS {{.Integer}}) FROM (
		SELECT {{.Minute "finished_at"}} AS m, outcome, count(*) AS n FROM {{.Q}}{{.Attempts}}{{.Q}}
		WHERE finished_at > {{.Ago 1}} GROUP BY {{.Minute "finished_at"}}, outcome
		UNION ALL SELECT {{.Minute "finished_at"}}, 'DELIVERED', sum(delivered) FROM {{.Q}}{{.Deliveries}}{{.Q}}
		WHERE completed_at > {{.Ago 2}} GROUP BY {{.Minute "finished_at"}}) x GROUP BY m, outcome ORDER BY 1
{{- else if .DeliveredOnRow -}}
SELECT m, outcome, CAST(sum(n) AS {{.Integer}}) FROM (
		SELECT {{.Minute "finished_at"}} AS m, outcome, count(*) AS n FROM {{.Q}}{{.Attempts}}{{.Q}}
		WHERE finished_at > {{.Ago 1}} GROUP BY {{.Minute "finished_at"}}, outcome
		UNION ALL SELECT {{.Minute "delivered_finished_at"}}, 'DELIVERED', count(*) FROM {{.Q}}{{.Outbox}}{{.Q}}
		WHERE delivered_finished_at > {{.Ago 2}} GROUP BY {{.Minute "delivered_finished_at"}}) x GROUP BY m, outcome ORDER BY 1
{{- else -}}
SELECT {{.Minute "finished_at"}}, outcome, count(*) FROM {{.Q}}{{.Attempts}}{{.Q}}
		WHERE finished_at > {{.Ago 1}} GROUP BY {{.Minute "finished_at"}}, outcome ORDER BY 1
{{- end}}{{end}}

{{define "relays"}}SELECT relay_id, host, started_at, heartbeat_at, in_flight FROM {{.Q}}{{.Relays}}{{.Q}}
		WHERE heartbeat_at > {{.Ago 1}} ORDER BY relay_id{{end}}

{{define "heartbeat"}}INSERT INTO {{.Q}}{{.Relays}}{{.Q}} (relay_id, host, started_at, heartbeat_at, in_flight)
		VALUES ({{.P 1}}, {{.P 2}}, {{.P 3}}, {{.Now}}, {{.P 4}}) {{.Upsert}}{{end}}

{{define "remove_relay"}}DELETE FROM {{.Q}}{{.Relays}}{{.Q}} WHERE relay_id = {{.P 1}}{{end}}
`)

// names is what a statement renders with: the dialect's quote and
// fragments, the tables, and per call the fixed fragments of a filter
// (a column prefix, a list of placeholders).
type names struct {
	d Dialect
	// Q is the identifier quote; Outbox, Relays and Attempts the tables.
	Q, Outbox, Relays, Attempts string
	// Now and Upsert are the dialect's clock and heartbeat conflict clause.
	Now, Upsert string
	// DeliveredOnRow, Integer, Held and Deliveries: see Dialect.
	DeliveredOnRow bool
	Integer, Held  string
	Deliveries     string
	// Pre prefixes the summary columns with a table alias ("f.").
	Pre string
	// IDs is a list of placeholders.
	IDs string
}

// P renders the n-th placeholder.
func (n names) P(i int) string { return n.d.Mark(i) }

// Status renders the status of a row (with the column prefix pre): the
// status column, or PROCESSING for a PENDING row a claim holds.
func (n names) Status(pre string) string {
	if n.d.Claimed == "" {
		return pre + "status"
	}
	return "CASE WHEN " + pre + "status = 'PENDING' AND " + fmt.Sprintf(n.d.Claimed, pre+"id") +
		" THEN 'PROCESSING' ELSE " + pre + "status END"
}

// Ago renders the database clock minus the microseconds in placeholder i.
func (n names) Ago(i int) string { return n.d.Ago(n.d.Mark(i)) }

// Text renders a UUID column as text.
func (n names) Text(col string) string { return n.d.Text(col) }

// Minute renders a stored time truncated to the minute.
func (n names) Minute(col string) string { return n.d.Minute(col) }

// Prefixed is n with the summary columns prefixed by alias.
func (n names) Prefixed(alias string) names {
	n.Pre = alias
	return n
}

// rendered are the statements rendered once for a store's tables.
type rendered struct {
	events, match, failed, chainHeads, chainCount, chainEvents string
	throughput, relays, heartbeat, removeRelay                 string
}

func render(n names) rendered {
	r := func(name string) string { return statements.MustRenderNamed(name, n) }
	return rendered{
		events: r("events"), match: r("match"), failed: r("failed"),
		chainHeads: r("chain_heads"), chainCount: r("chain_count"), chainEvents: r("chain_events"),
		throughput: r("throughput"), relays: r("relays"), heartbeat: r("heartbeat"), removeRelay: r("remove_relay"),
	}
}
