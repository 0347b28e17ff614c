-- admin.row_busy tells whether a claim holds row ?.
{{define "admin.row_busy"}}SELECT EXISTS ({{template "queries.busy" .}} WHERE j.id = ?){{end}}

-- admin.blocked_aggregates lists the first 100 aggregates held back by a FAILED
-- event (with the event and how many events wait behind it), and how many
-- there are in all.
{{define "admin.blocked_aggregates"}}
WITH f AS (
    SELECT aggregate_type, aggregate_id, MIN(id) AS id FROM `{{.Outbox}}` WHERE status = 'FAILED'
    GROUP BY aggregate_type, aggregate_id
),
b AS (
    SELECT f.aggregate_type, f.aggregate_id, (SELECT e.event_id FROM `{{.Outbox}}` e WHERE e.id = f.id) AS event_id,
        (SELECT COUNT(*) FROM `{{.Outbox}}` o WHERE o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
           AND o.unfinished = 1 AND o.id > f.id AND o.status IN ('PENDING', 'BLOCKED')) AS waiting
    FROM f
)
SELECT aggregate_type, aggregate_id, event_id, waiting, COUNT(*) OVER () FROM b
WHERE waiting > 0 ORDER BY aggregate_type, aggregate_id LIMIT 100{{end}}

-- The figures of Stats: the rows by status, and the PENDING rows a claim
-- holds (PROCESSING).
{{define "admin.stats"}}SELECT status, COUNT(*) FROM `{{.Outbox}}` GROUP BY status{{end}}

{{define "admin.busy_pending"}}SELECT COUNT(DISTINCT o.id) FROM ({{template "queries.busy" .}}) b
JOIN `{{.Outbox}}` o ON o.id = b.id WHERE o.status = 'PENDING'{{end}}

{{define "admin.oldest_pending"}}SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) FROM `{{.Outbox}}` WHERE status = 'PENDING'{{end}}

{{define "admin.dead_letter_count"}}SELECT COUNT(*) FROM `{{.DeadLetters}}` WHERE requeued_at IS NULL{{end}}

-- admin.record_from joins each outbox row (o) to the claim that holds it, if
-- any (cl): admin.record_columns read a PENDING row a claim holds as PROCESSING.
{{define "admin.record_from"}} FROM `{{.Outbox}}` o LEFT JOIN (
    SELECT j.id AS cid, MIN(bc.token) AS token FROM `{{.Outbox}}_claims` bc,
        JSON_TABLE(bc.ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j GROUP BY j.id
) cl ON cl.cid = o.id{{end}}

-- One event's row, by its event id (?).
{{define "admin.get_record"}}SELECT {{template "admin.record_columns" .}}{{template "admin.record_from" .}} WHERE o.event_id = ?{{end}}

-- The operator's statements (admin.go). admin.list_events, admin.count_matching and
-- admin.select_matching are the fixed heads of statements whose WHERE is written
-- from a filter's fixed fragments and bind parameters.
{{define "admin.list_events"}}SELECT {{template "admin.record_columns" .}}{{template "admin.record_from" .}}{{end}}

{{define "admin.count_matching"}}SELECT COUNT(*) FROM `{{.Outbox}}` WHERE {{end}}

{{define "admin.select_matching"}}SELECT id, event_id FROM `{{.Outbox}}` WHERE {{end}}

-- The audit trail of event ? (given twice), in the order the attempts
-- finished: its rows in the attempts table and the delivery recorded on
-- the event row (migration 00006), each with its receipt.
{{define "admin.attempts"}}SELECT attempt, relay_id, claim_token, started_at, finished_at, outcome, COALESCE(`error`, ''), COALESCE(trace_id, ''),
    receipt
FROM `{{.Attempts}}` WHERE event_id = ?
UNION ALL
SELECT delivered_attempt, delivered_relay_id, COALESCE(delivered_token, ''), delivered_started_at, delivered_finished_at,
    'DELIVERED', '', COALESCE(delivered_trace_id, ''), delivered_receipt
FROM `{{.Outbox}}` WHERE event_id = ? AND delivered_relay_id IS NOT NULL
ORDER BY 1, 5, 4{{end}}

-- The dead letters, newest first, at most ?.
{{define "admin.dead_letters"}}SELECT id, outbox_id, event_id, aggregate_type, aggregate_id, event_type, retry_count,
reason, failed_at, requeued_at FROM `{{.DeadLetters}}` ORDER BY id DESC LIMIT ?{{end}}

-- admin.operator_lock locks the row of event ? for an operator action, with the
-- database clock (admin.row_busy then tells whether a claim holds it).
{{define "admin.operator_lock"}}SELECT id, status, retry_count, aggregate_type, aggregate_id, UTC_TIMESTAMP(6) FROM `{{.Outbox}}`
WHERE event_id = ? FOR UPDATE{{end}}

-- admin.operator_requeue gives a row a fresh chance now (the placeholders: now,
-- the new deadline in microseconds or NULL twice, now, now, the row id); a
-- passed deadline is removed unless a new one is given. A row finished
-- before migration 00007 gets its lane.
{{define "admin.operator_requeue"}}UPDATE `{{.Outbox}}` SET status = 'PENDING', available_at = CAST(? AS DATETIME(6)), processed_at = NULL,
locked_until = NULL, lock_token = NULL, lane = COALESCE(lane, {{.LaneOf}}),
expires_at = CASE WHEN ? IS NOT NULL THEN CAST(? AS DATETIME(6)) + INTERVAL ? MICROSECOND
WHEN expires_at <= CAST(? AS DATETIME(6)) THEN NULL ELSE expires_at END
WHERE id = ?{{end}}

{{define "admin.operator_requeue_dead"}}UPDATE `{{.DeadLetters}}` SET requeued_at = CAST(? AS DATETIME(6))
WHERE outbox_id = ? AND requeued_at IS NULL{{end}}

{{define "admin.operator_set_status"}}UPDATE `{{.Outbox}}` SET status = ? WHERE id = ?{{end}}

-- admin.operator_audit records an operator action as an attempt row.
{{define "admin.operator_audit"}}INSERT INTO `{{.Attempts}}` (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, `error`)
VALUES (?, ?, ?, ?, ?, ?, CAST(? AS DATETIME(6)), CAST(? AS DATETIME(6)), ?){{end}}

-- admin.move_delivery copies the delivery recorded on row ? into the attempts
-- table (a step run again writes nothing twice), and admin.clear_delivery
-- clears it from row ?, before an operator action changes the row: a
-- second delivery then overwrites nothing.
{{define "admin.move_delivery"}}INSERT IGNORE INTO `{{.Attempts}}` (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, trace_id, receipt)
SELECT event_id, COALESCE(delivered_token, UUID()), 'DELIVERED', id, COALESCE(delivered_attempt, 0), delivered_relay_id,
    COALESCE(delivered_started_at, delivered_finished_at, UTC_TIMESTAMP(6)), COALESCE(delivered_finished_at, UTC_TIMESTAMP(6)), delivered_trace_id,
    delivered_receipt
FROM `{{.Outbox}}` WHERE id = ? AND delivered_relay_id IS NOT NULL{{end}}

{{define "admin.clear_delivery"}}UPDATE `{{.Outbox}}` SET delivered_relay_id = NULL, delivered_attempt = NULL, delivered_started_at = NULL,
delivered_finished_at = NULL, delivered_trace_id = NULL, delivered_token = NULL, delivered_receipt = NULL
WHERE id = ? AND delivered_relay_id IS NOT NULL{{end}}

-- The first FAILED event of aggregate (?, ?), and the BLOCKED events it
-- does not hold back: all of them, or (admin.operator_blocked_before) those
-- before id ?. Read without locks, then changed by primary key
-- (admin.operator_unblock, over the id list IDs).
{{define "admin.operator_first_failed"}}SELECT MIN(id) FROM `{{.Outbox}}` WHERE aggregate_type = ? AND aggregate_id = ?
AND unfinished = 1 AND status = 'FAILED'{{end}}

{{define "admin.operator_blocked"}}SELECT id FROM `{{.Outbox}}` WHERE aggregate_type = ? AND aggregate_id = ? AND unfinished = 1 AND status = 'BLOCKED'{{end}}

{{define "admin.operator_blocked_before"}}{{template "admin.operator_blocked" .}} AND id < ?{{end}}

{{define "admin.operator_unblock"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET status = 'PENDING' WHERE id IN ({{.IDs}}) AND status = 'BLOCKED'{{end}}

-- A purge's page: of the ? rows after id ?, whether each is purgeable (a
-- final status of the list In, finished before the cutoff, now minus ?
-- microseconds, and meeting Cond: on an adopted table, finished after the
-- adoption), whether it is older than the cutoff, and the cutoff. In
-- holds store status names, validated constants quoted in Go.
{{define "admin.purge_page"}}SELECT id, (status IN ({{.In}}) AND processed_at IS NOT NULL AND processed_at <= c.cutoff{{.Cond}}),
created_at <= c.cutoff, c.cutoff FROM `{{.Outbox}}` JOIN (SELECT UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AS cutoff) c
WHERE id > ? ORDER BY id LIMIT ?{{end}}

-- admin.purge_lock locks the rows IDs that are still purgeable at the cutoff ?,
-- skipping those another transaction holds; the purge_delete_* statements
-- delete them with their attempts (event ids Marks, placeholders) and
-- dead letters.
{{define "admin.purge_lock"}}SELECT id, event_id FROM `{{.Outbox}}` WHERE id IN ({{.IDs}}) AND status IN ({{.In}})
AND processed_at <= CAST(? AS DATETIME(6)){{.Cond}} ORDER BY id FOR UPDATE SKIP LOCKED{{end}}

{{define "admin.purge_delete_attempts"}}DELETE FROM `{{.Attempts}}` WHERE event_id IN ({{.Marks}}){{end}}

{{define "admin.purge_delete_dead"}}DELETE FROM `{{.DeadLetters}}` WHERE outbox_id IN ({{.IDs}}){{end}}

{{define "admin.purge_delete"}}DELETE FROM `{{.Outbox}}` WHERE id IN ({{.IDs}}){{end}}

-- admin.record_columns are the columns of a store.Record, from
-- admin.record_from: a PENDING row that a claim holds (cl) is PROCESSING,
-- until the lease of its lane, under the claim's token; a row PROCESSING
-- under a lease of the schema before lanes keeps its own.
{{define "admin.record_columns"}}o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
    CASE WHEN o.status = 'PENDING' AND cl.cid IS NOT NULL THEN 'PROCESSING' ELSE o.status END,
    o.retry_count, o.created_at, o.processed_at, o.available_at, o.expires_at,
    COALESCE(o.locked_until, CASE WHEN o.status = 'PENDING' AND cl.cid IS NOT NULL THEN
        (SELECT TIMESTAMPADD(MICROSECOND, l.lease_until_ms * 1000, CAST('1970-01-01 00:00:00' AS DATETIME(6)))
         FROM `{{.Outbox}}_lanes` l WHERE l.lane = o.lane) END),
    COALESCE(o.lock_token, CASE WHEN o.status = 'PENDING' THEN cl.token END), o.last_error{{end}}

-- admin.claimed holds when a claim in flight holds the row whose id column
-- is %[1]s (the admin queries' status: a PENDING row a claim holds reads
-- PROCESSING). No table of the subquery has a column "id", which would
-- capture an unqualified %[1]s.
{{define "admin.claimed"}}EXISTS (SELECT 1 FROM `{{.Outbox}}_claims` bc, JSON_TABLE(bc.ids, '$[*]' COLUMNS (cid BIGINT PATH '$')) AS j WHERE j.cid = %[1]s){{end}}

-- admin.count_attempt counts the delivery of row ? as an attempt, before a
-- replay: the next delivery is numbered after it.
{{define "admin.count_attempt"}}UPDATE `{{.Outbox}}` SET retry_count = retry_count + 1 WHERE id = ?{{end}}

-- admin.replay_aggregates is the head of the statement that pages through the
-- aggregates that have events a replay matches (its WHERE follows).
{{define "admin.replay_aggregates"}}SELECT DISTINCT aggregate_type, aggregate_id FROM `{{.Outbox}}` WHERE {{end}}

-- admin.replay_rows is the head of the statement that locks the events of
-- one aggregate a replay matches (its WHERE follows).
{{define "admin.replay_rows"}}SELECT id, event_id FROM `{{.Outbox}}` WHERE {{end}}

-- admin.replay_held returns the first event of aggregate (?, ?) that holds a
-- replay back: PROCESSING (a PENDING row a claim holds, or a row under a
-- lease of the schema before lanes), FAILED or BLOCKED.
{{define "admin.replay_held"}}SELECT event_id, CASE WHEN status = 'PENDING' THEN 'PROCESSING' ELSE status END
FROM `{{.Outbox}}` WHERE aggregate_type = ? AND aggregate_id = ?
    AND (status IN ('PROCESSING', 'FAILED', 'BLOCKED') OR (status = 'PENDING' AND id IN ({{template "queries.busy" .}})))
ORDER BY id LIMIT 1{{end}}
