-- compensate.select reads the EXPIRED rows IDs that carry a compensation;
-- compensate.existing_events which of the event ids Marks exist already.
{{define "compensate.select"}}SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, expires_at, retry_count, on_expired
FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE id IN ({{.IDs}}) AND status = 'EXPIRED' AND on_expired IS NOT NULL ORDER BY id{{end}}

{{define "compensate.existing_events"}}SELECT event_id FROM `{{.Outbox}}` WHERE event_id IN ({{.Marks}}){{end}}
