-- The admin queries (statements.go), shared by the backends: Q is the
-- dialect's identifier quote around the validated table names Outbox,
-- Relays and Attempts; P n is the dialect's n-th placeholder, and Now,
-- Ago n, Text col, Minute col, Upsert key and Inserted col are its fixed
-- fragments (store/internal/dialect). Every value is a bind parameter. The
-- statements whose WHERE comes from a filter are heads here; the filter's
-- conditions follow them.

{{define "statements.summary"}}{{.Pre}}id, {{.Text (print .Pre "event_id")}}, {{.Pre}}aggregate_type, {{.Pre}}aggregate_id, {{.Pre}}event_type, {{.Status .Pre}},
		{{.Pre}}retry_count, {{.Pre}}created_at, {{.Pre}}processed_at, {{.Pre}}available_at, {{.Pre}}expires_at, {{.Pre}}last_error{{end}}

{{define "statements.events"}}SELECT {{template "statements.summary" .}} FROM {{.Q}}{{.Outbox}}{{.Q}}{{end}}

{{define "statements.match"}}SELECT id, {{.Text "event_id"}}, {{.Status ""}}, expires_at FROM {{.Q}}{{.Outbox}}{{.Q}}{{end}}

{{define "statements.blocked_behind"}}SELECT count(*), SUM(CASE WHEN b.expires_at <= {{.Now}} THEN 1 ELSE 0 END)
		FROM {{.Q}}{{.Outbox}}{{.Q}} b WHERE {{.Held}}b.status = 'BLOCKED' AND EXISTS (SELECT 1 FROM {{.Q}}{{.Outbox}}{{.Q}} h
			WHERE h.id IN ({{.IDs}}) AND h.aggregate_type = b.aggregate_type
			  AND h.aggregate_id = b.aggregate_id AND h.id < b.id){{end}}

{{define "statements.failed"}}{{template "statements.events" .}} WHERE {{.Held}}status = 'FAILED' ORDER BY id LIMIT {{.P 1}}{{end}}

{{define "statements.chain_heads"}}SELECT {{template "statements.summary" .Prefixed "f."}} FROM {{.Q}}{{.Outbox}}{{.Q}} f
		WHERE {{.Held}}f.status = 'FAILED'
		  AND EXISTS (SELECT 1 FROM {{.Q}}{{.Outbox}}{{.Q}} b WHERE {{.Held}}b.status = 'BLOCKED' AND b.aggregate_type = f.aggregate_type
					  AND b.aggregate_id = f.aggregate_id AND b.id > f.id)
		  AND NOT EXISTS (SELECT 1 FROM {{.Q}}{{.Outbox}}{{.Q}} e WHERE {{.Held}}e.status = 'FAILED' AND e.aggregate_type = f.aggregate_type
					  AND e.aggregate_id = f.aggregate_id AND e.id < f.id)
		ORDER BY f.id LIMIT {{.P 1}}{{end}}

{{define "statements.chain_where"}} FROM {{.Q}}{{.Outbox}}{{.Q}} WHERE {{.Held}}status = 'BLOCKED' AND aggregate_type = {{.P 1}}
		AND aggregate_id = {{.P 2}} AND id > {{.P 3}}{{end}}

{{define "statements.chain_count"}}SELECT count(*){{template "statements.chain_where" .}}{{end}}

{{define "statements.chain_events"}}SELECT {{template "statements.summary" .}}{{template "statements.chain_where" .}} ORDER BY id LIMIT {{.P 4}}{{end}}

{{define "statements.throughput"}}
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

-- The publish durations of the last minutes, newest first: the attempts
-- that called the sink (finished_at index, read backwards), and the
-- deliveries, per batch (PostgreSQL's deliveries table, by its completed_at
-- index; n is the batch's event count) or on the event rows (MySQL and
-- SQLite, by their delivered_finished_at index). Each part and the whole
-- are bounded by the limit.
{{define "statements.publish_attempts"}}SELECT * FROM (SELECT started_at AS s, finished_at AS f, 1 AS n FROM {{.Q}}{{.Attempts}}{{.Q}}
		WHERE finished_at > {{.Ago 1}} AND outcome IN ('DELIVERED', 'RETRY', 'FAILED')
		ORDER BY finished_at DESC LIMIT {{.P 2}}) a{{end}}

{{define "statements.publish_durations"}}
{{- if .Deliveries -}}
SELECT s, f, n FROM ({{template "statements.publish_attempts" .}}
		UNION ALL SELECT * FROM (SELECT started_at AS s, finished_at AS f, delivered AS n FROM {{.Q}}{{.Deliveries}}{{.Q}}
		WHERE completed_at > {{.Ago 3}} ORDER BY completed_at DESC LIMIT {{.P 4}}) d) x ORDER BY f DESC LIMIT {{.P 5}}
{{- else if .DeliveredOnRow -}}
SELECT s, f, n FROM ({{template "statements.publish_attempts" .}}
		UNION ALL SELECT * FROM (SELECT delivered_started_at AS s, delivered_finished_at AS f, 1 AS n FROM {{.Q}}{{.Outbox}}{{.Q}}
		WHERE delivered_finished_at > {{.Ago 3}} AND delivered_started_at IS NOT NULL
		ORDER BY delivered_finished_at DESC LIMIT {{.P 4}}) d) x ORDER BY f DESC LIMIT {{.P 5}}
{{- else -}}
SELECT s, f, n FROM {{template "statements.publish_attempts" .}}
{{- end}}{{end}}

{{define "statements.relays"}}SELECT relay_id, host, started_at, heartbeat_at, in_flight FROM {{.Q}}{{.Relays}}{{.Q}}
		WHERE heartbeat_at > {{.Ago 1}} ORDER BY relay_id{{end}}

{{define "statements.heartbeat"}}INSERT INTO {{.Q}}{{.Relays}}{{.Q}} (relay_id, host, started_at, heartbeat_at, in_flight)
		VALUES ({{.P 1}}, {{.P 2}}, {{.P 3}}, {{.Now}}, {{.P 4}}) {{.Upsert "relay_id"}} heartbeat_at = {{.Now}}, host = {{.Inserted "host"}},
		started_at = {{.Inserted "started_at"}}, in_flight = {{.Inserted "in_flight"}}{{end}}

{{define "statements.remove_relay"}}DELETE FROM {{.Q}}{{.Relays}}{{.Q}} WHERE relay_id = {{.P 1}}{{end}}
