-- store.now reads the database clock once per transaction: every statement
-- of the transaction then uses that one value, as PostgreSQL's now() does.
{{define "store.now"}}SELECT strftime({{.TS}}, 'now'){{end}}
