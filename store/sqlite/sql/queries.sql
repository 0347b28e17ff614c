-- Fragments shared by the statements of several steps. Identifiers are
-- templated ({{.Outbox}} between double quotes), {{.TS}} is the strftime
-- format of stored timestamps; every value is a bind parameter.

-- queries.busy lists the rows the claims in flight hold (PROCESSING).
{{define "queries.busy"}}SELECT j.value FROM "{{.Outbox}}_claims" bc, json_each(bc.ids) j{{end}}

-- queries.unfinished repeats the WHERE clause of the aggregate index:
-- SQLite uses a partial index only when the query names its condition, and
-- does not infer it from status = 'PENDING'.
{{define "queries.unfinished"}}status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED'){{end}}
