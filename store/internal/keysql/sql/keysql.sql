-- The data-key statements (keysql.go), shared by the backends: {{.Q}} is
-- the dialect's identifier quote around the keys table {{.Keys}}, P n the
-- dialect's n-th placeholder; the other fields are the dialect's fixed
-- fragments (store/internal/dialect) and the page size. Every value is a
-- bind parameter.

{{define "keysql.columns"}}subject, version, wrapped_key, kek_id, created_at_ms, shredded_at_ms, shredded_by, shred_reason{{end}}

-- keysql.create stores a data key unless its subject has that version.
{{define "keysql.create"}}{{.InsertIgnore}} {{.Q}}{{.Keys}}{{.Q}} (subject, version, wrapped_key, kek_id, created_at_ms)
		VALUES ({{.P 1}}, {{.P 2}}, {{.P 3}}, {{.P 4}}, {{.ClockMS}}) {{.Conflict}}{{end}}

{{define "keysql.version"}}SELECT {{template "keysql.columns"}} FROM {{.Q}}{{.Keys}}{{.Q}} WHERE subject = {{.P 1}} AND version = {{.P 2}}{{end}}

-- keysql.version_locked reads the key just stored (or the one that was
-- there): a locking read sees the latest committed row whatever the
-- producer's isolation level.
{{define "keysql.version_locked"}}SELECT {{template "keysql.columns"}} FROM {{.Q}}{{.Keys}}{{.Q}} WHERE subject = {{.P 1}} AND version = {{.P 2}} {{.Lock}}{{end}}

{{define "keysql.latest"}}SELECT {{template "keysql.columns"}} FROM {{.Q}}{{.Keys}}{{.Q}} WHERE subject = {{.P 1}}
		ORDER BY version DESC LIMIT 1{{end}}

-- keysql.page reads the keys after (subject, version), in that order.
{{define "keysql.page"}}SELECT {{template "keysql.columns"}} FROM {{.Q}}{{.Keys}}{{.Q}}
		WHERE subject > {{.P 1}} OR (subject = {{.P 2}} AND version > {{.P 3}}) ORDER BY subject, version LIMIT {{.Limit}}{{end}}

-- keysql.rewrap replaces the wrapping of one key, only if the key-encryption
-- key that wraps it is still the one read and it was not shredded.
{{define "keysql.rewrap"}}UPDATE {{.Q}}{{.Keys}}{{.Q}} SET wrapped_key = {{.P 1}}, kek_id = {{.P 2}}, rewrapped_at_ms = {{.ClockMS}}
		WHERE subject = {{.P 3}} AND version = {{.P 4}} AND kek_id = {{.P 5}} AND wrapped_key IS NOT NULL{{end}}

-- keysql.seal_pending replaces the plain payload of an event not yet
-- finished with its envelope (a claimed event stays PENDING; its claim
-- lives in the claims table). The event id must match the one sealed in.
{{define "keysql.seal_pending"}}UPDATE {{.Q}}{{.Outbox}}{{.Q}} SET payload = {{.P 1}}
		WHERE id = {{.P 2}} AND event_id = {{.P 3}} AND status = 'PENDING'{{end}}

-- keysql.shred deletes every version of a subject's data key and records
-- when, by whom and why.
{{define "keysql.shred"}}UPDATE {{.Q}}{{.Keys}}{{.Q}} SET wrapped_key = NULL, shredded_at_ms = {{.ClockMS}}, shredded_by = {{.P 1}},
		shred_reason = {{.P 2}} WHERE subject = {{.P 3}} AND wrapped_key IS NOT NULL{{end}}
