-- The heads of the producer's multi-row inserts: the rows (placeholders
-- and fixed expressions) follow, written by enqueue.go. The aggregates
-- table's rows are locked in key order by inserting them.
{{define "enqueue.head"}}INSERT INTO `{{.Outbox}}` (event_id, aggregate_type, aggregate_id, event_type, payload, headers, on_expired, status, created_at, expires_at, available_at, aggregate_seq) VALUES {{end}}

{{define "enqueue.lock_aggregates_head"}}INSERT INTO `{{.Outbox}}_aggregates` (aggregate_type, aggregate_id, last_seq) VALUES {{end}}

{{define "enqueue.lock_aggregates_tail"}} ON DUPLICATE KEY UPDATE last_seq = last_seq{{end}}
