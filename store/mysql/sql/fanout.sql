-- The fan-out (fanout.go): copies of another outbox table's rows, and the
-- event types of the unfinished events. From is the source table, in the
-- same database as Outbox, and IDs its row ids (integers formatted in Go),
-- both rendered per call (store.ValidateTable checked the name).

-- fanout.lock_aggregates is enqueue.lock_aggregates for the aggregates of
-- the rows IDs of From that this table lacks (by event_id): it locks their
-- rows of the aggregates table in ascending order, creating the missing
-- ones, before fanout.copy writes a row, so that the AUTO_INCREMENT ids of
-- the copy follow every earlier commit of those aggregates.
{{define "fanout.lock_aggregates"}}INSERT INTO `{{.Outbox}}_aggregates` (aggregate_type, aggregate_id, last_seq)
SELECT DISTINCT s.aggregate_type, s.aggregate_id, 0 FROM `{{.From}}` s
WHERE s.id IN ({{.IDs}})
  AND NOT EXISTS (SELECT 1 FROM `{{.Outbox}}` d WHERE d.event_id = s.event_id)
ORDER BY s.aggregate_type, s.aggregate_id
ON DUPLICATE KEY UPDATE last_seq = `{{.Outbox}}_aggregates`.last_seq{{end}}

-- fanout.copy writes the rows IDs of From that this table lacks (by
-- event_id) as new PENDING events due now, in id order. The times are UTC
-- already: aggregate_seq = 0 tells the insert trigger so (migration 2),
-- which then numbers the row; the lane trigger (migration 7) gives it its
-- lane. The no-op ON DUPLICATE KEY UPDATE skips an event that a copy
-- committed between the NOT EXISTS and the insert, and nothing else: any
-- other error still fails the statement (INSERT IGNORE would hide them).
{{define "fanout.copy"}}INSERT INTO `{{.Outbox}}` (event_id, aggregate_type, aggregate_id, event_type, payload, headers, on_expired,
    status, created_at, expires_at, available_at, aggregate_seq)
SELECT s.event_id, s.aggregate_type, s.aggregate_id, s.event_type, s.payload, s.headers, s.on_expired,
    'PENDING', s.created_at, s.expires_at, UTC_TIMESTAMP(6), 0
FROM `{{.From}}` s
WHERE s.id IN ({{.IDs}})
  AND NOT EXISTS (SELECT 1 FROM `{{.Outbox}}` d WHERE d.event_id = s.event_id)
ORDER BY s.id
ON DUPLICATE KEY UPDATE event_id = `{{.Outbox}}`.event_id{{end}}

-- fanout.event_types counts the unfinished events per (event type,
-- aggregate type), in byte order (the columns' collation is utf8mb4_bin).
-- A claimed event is PENDING in its row.
{{define "fanout.event_types"}}SELECT event_type, aggregate_type, COUNT(*) FROM `{{.Outbox}}`
WHERE unfinished = 1
GROUP BY event_type, aggregate_type
ORDER BY event_type, aggregate_type{{end}}
