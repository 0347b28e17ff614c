package mysql

import (
	"github.com/txoutbox/outbox/internal/sqltext"
	"github.com/txoutbox/outbox/store"
	"github.com/txoutbox/outbox/store/internal/adoptsql"
)

// adoptStatements are the adoption's fixed statements, in the template
// syntax of the queries and migrations: {{.Outbox}}, {{.Attempts}},
// {{.Migrations}} and {{.Record}} (the adoption record) are the validated
// table names, and {{.Outcome}} and {{.Note}} are the adoption's constants.
var adoptStatements = sqltext.MustParse("adopt", "{{define \"record_table\"}}CREATE TABLE IF NOT EXISTS `{{.Record}}` (\n"+
	"    kind       VARCHAR(20)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n"+
	"    name       VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n"+
	"    adopted_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),\n"+
	"    PRIMARY KEY (kind, name)\n) ENGINE = InnoDB{{end}}"+`
{{define "record_insert"}}INSERT IGNORE INTO `+"`{{.Record}}`"+` (kind, name) VALUES{{end}}
{{define "record_adopted_at"}}SELECT MAX(adopted_at) FROM `+"`{{.Record}}`"+`{{end}}
{{define "record_read"}}SELECT kind, name FROM `+"`{{.Record}}`"+` ORDER BY kind, name{{end}}
{{define "record_defaults"}}SELECT name FROM `+"`{{.Record}}`"+` WHERE kind = 'column' AND name IN ('available_at', 'event_id') ORDER BY name{{end}}
{{define "alter_outbox"}}ALTER TABLE `+"`{{.Outbox}}`"+`{{end}}
{{define "backfill_event_id"}}UPDATE `+"`{{.Outbox}}`"+` SET event_id = UUID() WHERE event_id IS NULL{{end}}
{{define "event_id_not_null"}}ALTER TABLE `+"`{{.Outbox}}`"+` MODIFY event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT (UUID()){{end}}
{{define "backfill_retry_count"}}UPDATE `+"`{{.Outbox}}`"+` SET retry_count = 0 WHERE retry_count IS NULL{{end}}
{{define "audit_processing"}}INSERT IGNORE INTO `+"`{{.Attempts}}`"+` (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, `+"`error`"+`)
SELECT event_id, UUID(), '{{.Outcome}}', id, retry_count, 'outbox migrate --adopt', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6),
    '{{.Note}}'
FROM `+"`{{.Outbox}}`"+` WHERE status = 'PROCESSING'{{end}}
{{define "release_processing"}}UPDATE `+"`{{.Outbox}}`"+` SET status = 'PENDING', locked_until = NULL, lock_token = NULL WHERE status = 'PROCESSING'{{end}}
{{define "count_unfinished"}}SELECT COUNT(*) FROM `+"`{{.Outbox}}`"+` WHERE status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED'){{end}}
{{define "count_by_status"}}SELECT status, COUNT(*) FROM `+"`{{.Outbox}}`"+` GROUP BY status{{end}}
{{define "drop_migrations"}}DROP TABLE IF EXISTS `+"`{{.Migrations}}`"+`{{end}}
{{define "drop_record"}}DROP TABLE IF EXISTS `+"`{{.Record}}`"+`{{end}}
`)

// adoptSQL renders the adoption's fixed statement name for the tables t.
func adoptSQL(t store.Tables, name string) string {
	return adoptStatements.MustRenderNamed(name, adoptsql.NamesFor(t))
}
