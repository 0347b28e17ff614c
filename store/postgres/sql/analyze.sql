-- analyze.outbox_name is the quoted outbox table as a regclass text, a
-- bind parameter of the analyze check; analyze.outbox analyzes the table.
{{define "analyze.outbox_name"}}"{{.Outbox}}"{{end}}

{{define "analyze.outbox"}}ANALYZE "{{.Outbox}}"{{end}}

-- analyze.stale tells whether the table $1 (a regclass text) needs an
-- ANALYZE the autovacuum will not run: autovacuum is off, for the server
-- or the table, and more than 10% of its rows changed since the last one.
{{define "analyze.stale"}}SELECT (current_setting('autovacuum') = 'off'
        OR COALESCE((SELECT option_value FROM pg_options_to_table(c.reloptions)
                     WHERE option_name = 'autovacuum_enabled'), 'true') = 'false')
   AND st.n_mod_since_analyze > 50 + 0.1 * st.n_live_tup
FROM pg_class c JOIN pg_stat_user_tables st ON st.relid = c.oid
WHERE c.oid = $1::regclass{{end}}
