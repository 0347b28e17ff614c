package postgres

import (
	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/adoptsql"
)

// adoptStatements are the adoption's fixed statements, in the template
// syntax of the queries and migrations: {{.Outbox}}, {{.Attempts}},
// {{.Migrations}} and {{.Record}} (the adoption record) are the validated
// table names, and
// {{.Outcome}} and {{.Note}} are the adoption's constants.
var adoptStatements = sqltext.MustParse("adopt", `
{{define "record_table"}}CREATE TABLE IF NOT EXISTS "{{.Record}}" (
    kind       VARCHAR(20)  NOT NULL,
    name       VARCHAR(200) NOT NULL,
    adopted_at TIMESTAMPTZ  NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, name)
){{end}}

{{define "backfill_event_id"}}UPDATE "{{.Outbox}}" SET event_id = gen_random_uuid() WHERE event_id IS NULL{{end}}
{{define "event_id_not_null"}}ALTER TABLE "{{.Outbox}}" ALTER COLUMN event_id SET NOT NULL{{end}}
{{define "event_id_default"}}ALTER TABLE "{{.Outbox}}" ALTER COLUMN event_id SET DEFAULT gen_random_uuid(){{end}}
{{define "backfill_retry_count"}}UPDATE "{{.Outbox}}" SET retry_count = 0 WHERE retry_count IS NULL{{end}}

{{define "audit_processing"}}INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
SELECT event_id, gen_random_uuid(), '{{.Outcome}}', id, retry_count, 'outbox migrate --adopt', now(), now(),
    '{{.Note}}'
FROM "{{.Outbox}}" WHERE status = 'PROCESSING'{{end}}
{{define "release_processing"}}UPDATE "{{.Outbox}}" SET status = 'PENDING', locked_until = NULL, lock_token = NULL WHERE status = 'PROCESSING'{{end}}

{{define "count_unfinished"}}SELECT count(*) FROM "{{.Outbox}}" WHERE status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED'){{end}}
{{define "count_by_status"}}SELECT status, count(*) FROM "{{.Outbox}}" GROUP BY status{{end}}

{{define "record_insert"}}INSERT INTO "{{.Record}}" (kind, name) VALUES{{end}}
{{define "record_adopted_at"}}SELECT max(adopted_at) FROM "{{.Record}}"{{end}}
{{define "record_read"}}SELECT kind, name FROM "{{.Record}}" ORDER BY kind, name{{end}}
{{define "alter_outbox"}}ALTER TABLE "{{.Outbox}}"{{end}}
{{define "drop_migrations"}}DROP TABLE IF EXISTS "{{.Migrations}}"{{end}}
{{define "drop_record"}}DROP TABLE IF EXISTS "{{.Record}}"{{end}}
`)

// adoptSQL renders the adoption's fixed statement name for the tables t.
func adoptSQL(t store.Tables, name string) string {
	return adoptStatements.MustRenderNamed(name, adoptsql.NamesFor(t))
}
