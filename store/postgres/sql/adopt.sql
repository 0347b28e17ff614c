-- The adoption's fixed statements (adopt.go): {{.Outbox}}, {{.Attempts}},
-- {{.Migrations}} and {{.Record}} (the adoption record) are the validated
-- table names, and {{.Outcome}} and {{.Note}} are the adoption's constants.

{{define "adopt.record_table"}}CREATE TABLE IF NOT EXISTS "{{.Record}}" (
    kind       VARCHAR(20)  NOT NULL,
    name       VARCHAR(200) NOT NULL,
    adopted_at TIMESTAMPTZ  NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, name)
){{end}}

{{define "adopt.backfill_event_id"}}UPDATE "{{.Outbox}}" SET event_id = gen_random_uuid() WHERE event_id IS NULL{{end}}

{{define "adopt.event_id_not_null"}}ALTER TABLE "{{.Outbox}}" ALTER COLUMN event_id SET NOT NULL{{end}}

{{define "adopt.event_id_default"}}ALTER TABLE "{{.Outbox}}" ALTER COLUMN event_id SET DEFAULT gen_random_uuid(){{end}}

{{define "adopt.backfill_retry_count"}}UPDATE "{{.Outbox}}" SET retry_count = 0 WHERE retry_count IS NULL{{end}}

{{define "adopt.audit_processing"}}INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
SELECT event_id, gen_random_uuid(), '{{.Outcome}}', id, retry_count, 'outbox migrate --adopt', now(), now(),
    '{{.Note}}'
FROM "{{.Outbox}}" WHERE status = 'PROCESSING'{{end}}

{{define "adopt.release_processing"}}UPDATE "{{.Outbox}}" SET status = 'PENDING', locked_until = NULL, lock_token = NULL WHERE status = 'PROCESSING'{{end}}

{{define "adopt.count_unfinished"}}SELECT count(*) FROM "{{.Outbox}}" WHERE status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED'){{end}}

{{define "adopt.count_by_status"}}SELECT status, count(*) FROM "{{.Outbox}}" GROUP BY status{{end}}

{{define "adopt.record_insert"}}INSERT INTO "{{.Record}}" (kind, name) VALUES{{end}}

{{define "adopt.record_adopted_at"}}SELECT max(adopted_at) FROM "{{.Record}}"{{end}}

{{define "adopt.record_read"}}SELECT kind, name FROM "{{.Record}}" ORDER BY kind, name{{end}}

{{define "adopt.alter_outbox"}}ALTER TABLE "{{.Outbox}}"{{end}}

{{define "adopt.drop_migrations"}}DROP TABLE IF EXISTS "{{.Migrations}}"{{end}}

{{define "adopt.drop_record"}}DROP TABLE IF EXISTS "{{.Record}}"{{end}}

-- adopt.indexes lists the indexes of table $1 (quoted) with whether each
-- is valid; adopt.constraints its constraints with whether each is
-- validated.
{{define "adopt.indexes"}}SELECT c.relname::text, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = to_regclass($1){{end}}

{{define "adopt.constraints"}}SELECT conname::text, convalidated FROM pg_constraint WHERE conrelid = to_regclass($1){{end}}

-- adopt.lock_timeout bounds the adoption transaction's waits for a lock.
{{define "adopt.lock_timeout"}}SET LOCAL lock_timeout = '10s'{{end}}
