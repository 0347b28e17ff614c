-- The operator's statements (admin.go). admin.list_events,
-- admin.count_matching and admin.select_matching are the fixed heads of
-- statements whose WHERE is written from a filter's fixed fragments and
-- bind parameters.

-- admin.record_columns are a record's columns, from admin.record_from: a
-- PENDING row that a claim holds (cl) is PROCESSING, until the lease of its
-- lane, under the claim's token; a row PROCESSING under a lease of the
-- schema before lanes keeps its own.
{{define "admin.record_columns"}}o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
    CASE WHEN o.status = 'PENDING' AND cl.cid IS NOT NULL THEN 'PROCESSING' ELSE o.status END,
    o.retry_count, o.created_at, o.processed_at, o.available_at, o.expires_at,
    COALESCE(o.locked_until, CASE WHEN o.status = 'PENDING' AND cl.cid IS NOT NULL THEN
        (SELECT strftime({{.TS}}, l.lease_until_ms / 1000.0, 'unixepoch') FROM "{{.Outbox}}_lanes" l WHERE l.lane = o.lane) END),
    COALESCE(o.lock_token, CASE WHEN o.status = 'PENDING' THEN cl.token END), o.last_error{{end}}

-- admin.record_from joins each outbox row to the claim that holds it, if any.
{{define "admin.record_from"}} FROM "{{.Outbox}}" o LEFT JOIN (
    SELECT j.value AS cid, min(bc.token) AS token FROM "{{.Outbox}}_claims" bc, json_each(bc.ids) j GROUP BY j.value
) cl ON cl.cid = o.id{{end}}

{{define "admin.list_events"}}SELECT {{template "admin.record_columns" .}}{{template "admin.record_from" .}}{{end}}

{{define "admin.get_event"}}SELECT {{template "admin.record_columns" .}}{{template "admin.record_from" .}} WHERE o.event_id = ?{{end}}

{{define "admin.count_matching"}}SELECT count(*) FROM "{{.Outbox}}" WHERE {{end}}

{{define "admin.select_matching"}}SELECT id, event_id FROM "{{.Outbox}}" WHERE {{end}}

-- admin.stats counts the rows by status, a PENDING row that a claim holds
-- as PROCESSING.
{{define "admin.stats"}}
SELECT CASE WHEN o.status = 'PENDING' AND o.id IN ({{template "queries.busy" .}}) THEN 'PROCESSING' ELSE o.status END, count(*)
FROM "{{.Outbox}}" o GROUP BY 1{{end}}

{{define "admin.oldest_pending"}}SELECT min(created_at) FROM "{{.Outbox}}" WHERE status = 'PENDING'{{end}}

{{define "admin.dead_letter_count"}}SELECT count(*) FROM "{{.DeadLetters}}" WHERE requeued_at IS NULL{{end}}

-- admin.blocked_aggregates lists the aggregates held behind a FAILED
-- event, with how many events wait behind it, at most 100, and their total.
{{define "admin.blocked_aggregates"}}
WITH f AS (
    SELECT aggregate_type, aggregate_id, min(id) AS id FROM "{{.Outbox}}" WHERE status = 'FAILED'
    GROUP BY aggregate_type, aggregate_id
),
b AS (
    SELECT f.aggregate_type, f.aggregate_id, (SELECT e.event_id FROM "{{.Outbox}}" e WHERE e.id = f.id) AS event_id,
        (SELECT count(*) FROM "{{.Outbox}}" o WHERE o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
           AND o.id > f.id AND o.status IN ('PENDING', 'BLOCKED') AND o.{{template "queries.unfinished" .}}) AS waiting
    FROM f
)
SELECT aggregate_type, aggregate_id, event_id, waiting, count(*) OVER () FROM b
WHERE waiting > 0 ORDER BY aggregate_type, aggregate_id LIMIT 100{{end}}

-- admin.operator_lock reads the row of event ? for an operator action,
-- with its status (PROCESSING while a claim holds it).
{{define "admin.operator_lock"}}SELECT id, CASE WHEN status = 'PENDING' AND id IN ({{template "queries.busy" .}}) THEN 'PROCESSING' ELSE status END,
        retry_count, aggregate_type, aggregate_id, event_id FROM "{{.Outbox}}" WHERE event_id = ?{{end}}

-- admin.attempts lists the audit trail of event ?1, in the order the
-- attempts finished: its rows in the attempts table and the delivery
-- recorded on the event row (migration 00006), each with its receipt.
{{define "admin.attempts"}}SELECT attempt, relay_id, claim_token, started_at, finished_at, outcome, COALESCE(error, ''), COALESCE(trace_id, ''),
            receipt
        FROM "{{.Attempts}}" WHERE event_id = ?1
        UNION ALL
        SELECT delivered_attempt, delivered_relay_id, COALESCE(delivered_token, ''), delivered_started_at, delivered_finished_at,
            'DELIVERED', '', COALESCE(delivered_trace_id, ''), delivered_receipt
        FROM "{{.Outbox}}" WHERE event_id = ?1 AND delivered_relay_id IS NOT NULL
        ORDER BY 1, 5, 4{{end}}

-- admin.move_delivery copies the delivery recorded on row ?1, if any, into
-- the attempts table, and admin.clear_delivery clears it from the row,
-- before an operator action changes the row: a second delivery then
-- overwrites nothing.
{{define "admin.move_delivery"}}
INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, trace_id, receipt)
SELECT event_id, COALESCE(delivered_token, lower(hex(randomblob(16)))), 'DELIVERED', id, COALESCE(delivered_attempt, 0),
    delivered_relay_id, COALESCE(delivered_started_at, delivered_finished_at), delivered_finished_at, delivered_trace_id,
    delivered_receipt
FROM "{{.Outbox}}" WHERE id = ?1 AND delivered_relay_id IS NOT NULL
ON CONFLICT DO NOTHING{{end}}

{{define "admin.clear_delivery"}}
UPDATE "{{.Outbox}}" SET delivered_relay_id = NULL, delivered_attempt = NULL, delivered_started_at = NULL,
    delivered_finished_at = NULL, delivered_trace_id = NULL, delivered_token = NULL, delivered_receipt = NULL
WHERE id = ?1 AND delivered_relay_id IS NOT NULL{{end}}

-- admin.dead_letters lists the dead letters, newest first, at most ?.
{{define "admin.dead_letters"}}SELECT id, outbox_id, event_id, aggregate_type, aggregate_id, event_type, retry_count,
        reason, failed_at, requeued_at FROM "{{.DeadLetters}}" ORDER BY id DESC LIMIT ?{{end}}

-- admin.operator_requeue gives row ?1 a fresh chance at ?2 (now); ?3,
-- when not NULL, is a new deadline as a strftime modifier from now, and a
-- passed deadline is removed otherwise.
{{define "admin.operator_requeue"}}UPDATE "{{.Outbox}}" SET status = 'PENDING', available_at = ?2, processed_at = NULL,
                locked_until = NULL, lock_token = NULL,
                expires_at = CASE WHEN ?3 IS NOT NULL THEN strftime({{.TS}}, ?2, ?3)
                                  WHEN expires_at <= ?2 THEN NULL ELSE expires_at END
                WHERE id = ?1{{end}}

{{define "admin.operator_requeue_dead"}}UPDATE "{{.DeadLetters}}" SET requeued_at = ? WHERE outbox_id = ? AND requeued_at IS NULL{{end}}

{{define "admin.operator_set_status"}}UPDATE "{{.Outbox}}" SET status = ? WHERE id = ?{{end}}

-- admin.operator_unblock releases the BLOCKED events of aggregate (?1, ?2)
-- that no earlier FAILED event of the aggregate still holds back.
{{define "admin.operator_unblock"}}UPDATE "{{.Outbox}}" SET status = 'PENDING'
            WHERE aggregate_type = ?1 AND aggregate_id = ?2 AND status = 'BLOCKED'
              AND NOT EXISTS (SELECT 1 FROM "{{.Outbox}}" f WHERE f.status = 'FAILED'
                  AND f.aggregate_type = ?1 AND f.aggregate_id = ?2 AND f.id < "{{.Outbox}}".id){{end}}

-- The purge, a page at a time: admin.purge_page reads the page after id ?1
-- (?2 rows) and tells which rows go (a status of ?4, a JSON array,
-- finished at or before the cutoff ?3) and which are old; the deletes take
-- JSON arrays of event ids or row ids; admin.purge_cutoff is now (?) moved
-- by a strftime modifier (?).
{{define "admin.purge_page"}}
SELECT id, event_id,
    (status IN (SELECT value FROM json_each(?4)) AND processed_at IS NOT NULL AND processed_at <= ?3) AS del,
    created_at <= ?3 AS old
FROM "{{.Outbox}}" WHERE id > ?1 ORDER BY id LIMIT ?2{{end}}

{{define "admin.purge_attempts"}}DELETE FROM "{{.Attempts}}" WHERE event_id IN (SELECT value FROM json_each(?1)){{end}}

{{define "admin.purge_dead_letters"}}DELETE FROM "{{.DeadLetters}}" WHERE outbox_id IN (SELECT value FROM json_each(?1)){{end}}

{{define "admin.purge_events"}}DELETE FROM "{{.Outbox}}" WHERE id IN (SELECT value FROM json_each(?1)){{end}}

{{define "admin.purge_cutoff"}}SELECT strftime({{.TS}}, ?, ?){{end}}

-- admin.claimed holds when a claim in flight holds the row whose id column
-- is %[1]s (the admin queries' status: a PENDING row a claim holds reads
-- PROCESSING).
{{define "admin.claimed"}}EXISTS (SELECT 1 FROM "{{.Outbox}}_claims" bc, json_each(bc.ids) j WHERE j.value = %[1]s){{end}}

-- admin.count_attempt counts the delivery of row ? as an attempt, before a
-- replay: the next delivery is numbered after it.
{{define "admin.count_attempt"}}UPDATE "{{.Outbox}}" SET retry_count = retry_count + 1 WHERE id = ?{{end}}

-- admin.replay_aggregates is the head of the statement that pages through the
-- aggregates that have events a replay matches (its WHERE follows).
{{define "admin.replay_aggregates"}}SELECT DISTINCT aggregate_type, aggregate_id FROM "{{.Outbox}}" WHERE {{end}}

-- admin.replay_rows is the head of the statement that reads the events of
-- one aggregate a replay matches (its WHERE follows).
{{define "admin.replay_rows"}}SELECT id, event_id FROM "{{.Outbox}}" WHERE {{end}}

-- admin.replay_held returns the first event of aggregate (?, ?) that holds a
-- replay back: PROCESSING (a PENDING row a claim holds, or a row under a
-- lease of the schema before lanes), FAILED or BLOCKED.
{{define "admin.replay_held"}}SELECT event_id, CASE WHEN status = 'PENDING' THEN 'PROCESSING' ELSE status END
FROM "{{.Outbox}}" WHERE aggregate_type = ? AND aggregate_id = ?
    AND (status IN ('PROCESSING', 'FAILED', 'BLOCKED') OR (status = 'PENDING' AND id IN ({{template "queries.busy" .}})))
ORDER BY id LIMIT 1{{end}}
