-- migrate.exists tells whether the table $1 (quoted, resolved through the
-- search_path as the store's queries resolve it) exists; migrate.columns
-- lists its columns in order.
{{define "migrate.exists"}}SELECT to_regclass($1) IS NOT NULL{{end}}

{{define "migrate.columns"}}SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum{{end}}
