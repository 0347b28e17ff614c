-- The adoption's fixed statements (adopt.go): {{.Outbox}}, {{.Attempts}},
-- {{.Migrations}} and {{.Record}} (the adoption record) are the validated
-- table names, and {{.Outcome}} and {{.Note}} are the adoption's constants.

{{define "adopt.record_table"}}CREATE TABLE IF NOT EXISTS `{{.Record}}` (
    kind       VARCHAR(20)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    name       VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    adopted_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (kind, name)
) ENGINE = InnoDB{{end}}

{{define "adopt.record_insert"}}INSERT IGNORE INTO `{{.Record}}` (kind, name) VALUES{{end}}

{{define "adopt.record_adopted_at"}}SELECT MAX(adopted_at) FROM `{{.Record}}`{{end}}

{{define "adopt.record_read"}}SELECT kind, name FROM `{{.Record}}` ORDER BY kind, name{{end}}

{{define "adopt.record_defaults"}}SELECT name FROM `{{.Record}}` WHERE kind = 'column' AND name IN ('available_at', 'event_id') ORDER BY name{{end}}

{{define "adopt.alter_outbox"}}ALTER TABLE `{{.Outbox}}`{{end}}

{{define "adopt.backfill_event_id"}}UPDATE `{{.Outbox}}` SET event_id = UUID() WHERE event_id IS NULL{{end}}

{{define "adopt.event_id_not_null"}}ALTER TABLE `{{.Outbox}}` MODIFY event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT (UUID()){{end}}

{{define "adopt.backfill_retry_count"}}UPDATE `{{.Outbox}}` SET retry_count = 0 WHERE retry_count IS NULL{{end}}

{{define "adopt.audit_processing"}}INSERT IGNORE INTO `{{.Attempts}}` (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, `error`)
SELECT event_id, UUID(), '{{.Outcome}}', id, retry_count, 'outbox migrate --adopt', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6),
    '{{.Note}}'
FROM `{{.Outbox}}` WHERE status = 'PROCESSING'{{end}}

{{define "adopt.release_processing"}}UPDATE `{{.Outbox}}` SET status = 'PENDING', locked_until = NULL, lock_token = NULL WHERE status = 'PROCESSING'{{end}}

{{define "adopt.count_unfinished"}}SELECT COUNT(*) FROM `{{.Outbox}}` WHERE status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED'){{end}}

{{define "adopt.count_by_status"}}SELECT status, COUNT(*) FROM `{{.Outbox}}` GROUP BY status{{end}}

{{define "adopt.drop_migrations"}}DROP TABLE IF EXISTS `{{.Migrations}}`{{end}}

{{define "adopt.drop_record"}}DROP TABLE IF EXISTS `{{.Record}}`{{end}}

-- adopt.indexes lists the indexes of table ? in the connection's database.
{{define "adopt.indexes"}}SELECT DISTINCT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ?{{end}}

-- adopt.later_defaults ends the adoption's plan with what is left to do
-- by hand, a comment.
{{define "adopt.later_defaults"}}-- once the insert trigger fills them: ALTER TABLE `{{.Outbox}}` ALTER COLUMN available_at DROP DEFAULT (and event_id), for the columns adoption added{{end}}
