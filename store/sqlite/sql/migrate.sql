-- migrate.columns_of lists the columns of table ?.
{{define "migrate.columns_of"}}SELECT name FROM pragma_table_info(?){{end}}

-- migrate.count_unfinished counts the events not yet finished, for the
-- schema inspection.
{{define "migrate.count_unfinished"}}SELECT count(*) FROM "{{.Outbox}}" WHERE status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED'){{end}}
