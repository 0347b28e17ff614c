-- The route statements (routesql.go), shared by the backends: {{.Q}} is
-- the dialect's identifier quote around the route table {{.Routes}} and its
-- log {{.Log}}, P n the dialect's n-th placeholder; the other fields
-- are the dialect's fixed fragments (store/internal/dialect) and the log's
-- filter and size. Every value is a bind parameter.

-- routesql.now_ms reads the database clock in Unix milliseconds.
{{define "routesql.now_ms"}}SELECT {{.ClockMS}}{{end}}

{{define "routesql.snapshot"}}SELECT {{template "routesql.columns"}} FROM {{.Q}}{{.Routes}}{{.Q}} ORDER BY route{{end}}

{{define "routesql.columns"}}route, state, version, opened_at_ms, probe_at_ms, probe_by, opens, forced, last_error, updated_at_ms{{end}}

{{define "routesql.ensure"}}{{.InsertIgnore}} {{.Q}}{{.Routes}}{{.Q}} (route, state, version, opens, forced, updated_at_ms)
		VALUES ({{.P 1}}, 'CLOSED', 0, 0, 0, {{.P 2}}) {{.Conflict}}{{end}}

{{define "routesql.lock"}}SELECT {{template "routesql.columns"}} FROM {{.Q}}{{.Routes}}{{.Q}} WHERE route = {{.P 1}} {{.Lock}}{{end}}

{{define "routesql.update"}}UPDATE {{.Q}}{{.Routes}}{{.Q}} SET state = {{.P 1}}, version = version + 1, opened_at_ms = {{.P 2}},
		probe_at_ms = {{.P 3}}, probe_by = {{.P 4}}, opens = {{.P 5}}, forced = {{.P 6}}, last_error = {{.P 7}}, updated_at_ms = {{.P 8}}
		WHERE route = {{.P 9}} AND version = {{.P 10}}{{end}}

{{define "routesql.log_insert"}}INSERT INTO {{.Q}}{{.Log}}{{.Q}} (at_ms, route, actor, from_state, to_state, reason, last_error)
		VALUES ({{.P 1}}, {{.P 2}}, {{.P 3}}, {{.P 4}}, {{.P 5}}, {{.P 6}}, {{.P 7}}){{end}}

{{define "routesql.log_select"}}SELECT at_ms, route, actor, from_state, to_state, reason, last_error FROM {{.Q}}{{.Log}}{{.Q}}
		{{- if .ByRoute}} WHERE route = {{.P 1}}{{end}} ORDER BY id DESC LIMIT {{.Limit}}{{end}}
