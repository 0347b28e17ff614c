-- admin.record_columns are a record's columns, from admin.record_from: a PENDING row that
-- a claim holds is PROCESSING, until the lease of its lane, under the
-- claim's token (c); a row PROCESSING under a lease of the schema before
-- lanes keeps its own.
{{define "admin.record_columns"}}o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
    CASE WHEN c.token IS NOT NULL THEN 'PROCESSING' ELSE o.status END,
    o.retry_count, o.created_at, o.processed_at, o.available_at, o.expires_at,
    COALESCE(c.until, o.locked_until), COALESCE(c.token, o.lock_token), o.last_error{{end}}

-- admin.record_from joins each outbox row to the claim that holds it, if any.
{{define "admin.record_from"}} FROM "{{.Outbox}}" o LEFT JOIN LATERAL (
    SELECT c.token, to_timestamp(l.lease_until_ms / 1000.0) AS until
    FROM "{{.Outbox}}_claims" c LEFT JOIN "{{.Outbox}}_lanes" l ON l.lane = o.lane
    WHERE o.status = 'PENDING' AND o.id = ANY(c.ids)
    ORDER BY c.created_ms DESC LIMIT 1) c ON true{{end}}

-- admin.purge_deliveries deletes a page ($2) of the deliveries table's rows
-- completed before $1 microseconds ago.
{{define "admin.purge_deliveries"}}DELETE FROM "{{.Outbox}}_deliveries" WHERE id IN (
    SELECT id FROM "{{.Outbox}}_deliveries" WHERE completed_at < now() - $1::bigint * interval '1 microsecond'
    ORDER BY id LIMIT $2){{end}}

-- admin.purge deletes one page of a purge: of the page ($2 rows after id $1),
-- the rows in a final status ($3) that finished before $4 microseconds ago
-- and, when $5 is not NULL, after $5 (the adoption of the table: rows that
-- finished earlier are the team's history), with their attempts and dead
-- letters, skipping rows another transaction holds. It returns what was deleted, the page's last id, and how many of
-- its rows are older than the cutoff.
{{define "admin.purge"}}
WITH p AS (
    SELECT id, created_at, status, processed_at FROM "{{.Outbox}}" WHERE id > $1 ORDER BY id LIMIT $2
),
d AS (
    SELECT o.id, o.event_id FROM "{{.Outbox}}" o JOIN p ON p.id = o.id
    WHERE o.status = ANY($3::text[]) AND o.processed_at < now() - $4::bigint * interval '1 microsecond'
      AND ($5::timestamptz IS NULL OR o.processed_at > $5::timestamptz)
    FOR UPDATE OF o SKIP LOCKED
),
da AS (DELETE FROM "{{.Attempts}}" a USING d WHERE a.event_id = d.event_id),
dd AS (DELETE FROM "{{.DeadLetters}}" x USING d WHERE x.outbox_id = d.id),
del AS (DELETE FROM "{{.Outbox}}" o USING d WHERE o.id = d.id RETURNING o.id)
SELECT (SELECT count(*) FROM del), COALESCE((SELECT max(id) FROM p), 0),
       (SELECT count(*) FROM p WHERE created_at < now() - $4::bigint * interval '1 microsecond'){{end}}

-- admin.stats counts the rows by status, a PENDING row that a claim holds as
-- PROCESSING: a scan of the whole table.
{{define "admin.stats"}}
SELECT CASE WHEN o.status = 'PENDING' AND b.id IS NOT NULL THEN 'PROCESSING' ELSE o.status END, count(*)
FROM "{{.Outbox}}" o LEFT JOIN (SELECT DISTINCT unnest(ids) AS id FROM "{{.Outbox}}_claims") b ON b.id = o.id
GROUP BY 1{{end}}

-- admin.dead_letters lists the dead letters, newest first, at most $1.
{{define "admin.dead_letters"}}SELECT id, outbox_id, event_id, aggregate_type, aggregate_id, event_type, retry_count,
        reason, failed_at, requeued_at FROM "{{.DeadLetters}}" ORDER BY id DESC LIMIT $1{{end}}

-- admin.operator_lock locks the row of event $1 for an operator action, and
-- reads its status (PROCESSING while a claim holds it).
{{define "admin.operator_lock"}}SELECT o.id, CASE WHEN o.status = 'PENDING' AND EXISTS (
            SELECT 1 FROM "{{.Outbox}}_claims" c WHERE o.id = ANY(c.ids)) THEN 'PROCESSING' ELSE o.status END,
        o.retry_count, o.aggregate_type, o.aggregate_id, o.event_id::text FROM "{{.Outbox}}" o
        WHERE o.event_id = $1::uuid FOR UPDATE OF o{{end}}

-- admin.operator_requeue gives row $1 a fresh chance now; $2, when not NULL,
-- is a new deadline in microseconds from now, and a passed deadline is
-- removed otherwise. A row that finished before migration 10 has no lane: it
-- gets its aggregate's (the insert trigger's).
{{define "admin.operator_requeue"}}UPDATE "{{.Outbox}}" o SET status = 'PENDING', hold = 1, available_at = now(), processed_at = NULL,
            locked_until = NULL, lock_token = NULL,
            lane = COALESCE(o.lane, (SELECT a.lane FROM "{{.Outbox}}_aggregates" a
                                     WHERE a.aggregate_type = o.aggregate_type AND a.aggregate_id = o.aggregate_id),
                            get_byte(decode(md5(o.aggregate_type || ':' || o.aggregate_id), 'hex'), 0) % 64),
            expires_at = CASE WHEN $2::bigint IS NOT NULL THEN now() + $2::bigint * interval '1 microsecond'
                              WHEN expires_at <= now() THEN NULL ELSE expires_at END
            WHERE id = $1{{end}}

-- admin.operator_set_status moves row $1 to the final status $2 (SKIPPED): out
-- of the hold indexes, and with a last_error, which the admin's list of
-- SKIPPED events reads.
{{define "admin.operator_set_status"}}UPDATE "{{.Outbox}}" SET status = $2, hold = 0,
        last_error = COALESCE(last_error, 'skipped by an operator') WHERE id = $1{{end}}

-- admin.operator_audit records an operator action as an attempt row.
{{define "admin.operator_audit"}}INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
        VALUES ($1::uuid, gen_random_uuid(), $2, $3, $4, $5, now(), now(), $6){{end}}

-- admin.operator_unblock releases the BLOCKED events of aggregate ($1, $2)
-- that no earlier FAILED event of the aggregate still holds back.
{{define "admin.operator_unblock"}}UPDATE "{{.Outbox}}" o SET status = 'PENDING', hold = 1
        WHERE o.aggregate_type = $1 AND o.aggregate_id = $2 AND o.hold = 2 AND o.status = 'BLOCKED'
          AND NOT EXISTS (SELECT 1 FROM "{{.Outbox}}" f WHERE f.hold = 2 AND f.status = 'FAILED'
              AND f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id AND f.id < o.id){{end}}

{{define "admin.blocked_aggregates"}}
WITH f AS (
    SELECT DISTINCT ON (aggregate_type, aggregate_id) aggregate_type, aggregate_id, id, event_id
    FROM "{{.Outbox}}" WHERE hold = 2 AND status = 'FAILED' ORDER BY aggregate_type, aggregate_id, id
),
b AS (
    SELECT f.aggregate_type, f.aggregate_id, f.event_id,
        (SELECT count(*) FROM "{{.Outbox}}" o WHERE o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
           AND o.id > f.id AND o.status IN ('PENDING', 'BLOCKED')) AS waiting
    FROM f
)
SELECT aggregate_type, aggregate_id, event_id, waiting, count(*) OVER () FROM b
WHERE waiting > 0 ORDER BY aggregate_type, aggregate_id LIMIT 100{{end}}

-- admin.attempts reads the audit trail of one event ($1), in attempt order
-- and oldest first within an attempt: its
-- rows in the attempts table, the delivery recorded on the event row (by
-- migration 7, before lanes), and its delivery in the deliveries table:
-- the one of its lane whose time is the row's processed_at. A delivery on
-- the row has its receipt in delivered_receipt.
{{define "admin.attempts"}}
WITH o AS (
    SELECT id, event_id, status, lane, retry_count, processed_at, delivered_attempt, delivered_relay_id, delivered_token, delivered_started_at,
        delivered_finished_at, delivered_trace_id, delivered_receipt
    FROM "{{.Outbox}}" WHERE event_id = $1::uuid
)
SELECT attempt, relay_id, claim_token, started_at, finished_at, outcome, COALESCE(error, ''), COALESCE(trace_id, ''), receipt
FROM "{{.Attempts}}" WHERE event_id = $1::uuid
UNION ALL
SELECT delivered_attempt, delivered_relay_id, delivered_token, delivered_started_at, delivered_finished_at, 'DELIVERED', '',
    COALESCE(delivered_trace_id, ''), delivered_receipt
FROM o WHERE delivered_relay_id IS NOT NULL
UNION ALL
SELECT o.retry_count + 1, d.relay_id, d.token, d.started_at, d.finished_at, 'DELIVERED', '',
    COALESCE(d.trace_ids[array_position(d.ids, o.id)], ''), o.delivered_receipt
FROM o JOIN "{{.Outbox}}_deliveries" d ON d.completed_at = o.processed_at AND o.lane = ANY(d.lanes)
    AND (d.ids IS NULL OR o.id = ANY(d.ids))
WHERE o.status = 'PROCESSED'
ORDER BY 1, 5, 4{{end}}

-- admin.move_delivery copies the delivery recorded on event row $1, if any,
-- into the attempts table and clears it from the row.
{{define "admin.move_delivery"}}
WITH r AS (
    SELECT id, event_id, delivered_token, delivered_attempt, delivered_relay_id, delivered_started_at,
        delivered_finished_at, delivered_trace_id, delivered_receipt
    FROM "{{.Outbox}}" WHERE id = $1 AND delivered_relay_id IS NOT NULL
),
a AS (
    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, trace_id, receipt)
    SELECT event_id, COALESCE(delivered_token, gen_random_uuid()), 'DELIVERED', id, delivered_attempt, delivered_relay_id,
        delivered_started_at, delivered_finished_at, delivered_trace_id, delivered_receipt
    FROM r
    ON CONFLICT DO NOTHING
)
UPDATE "{{.Outbox}}" o SET delivered_relay_id = NULL, delivered_attempt = NULL, delivered_started_at = NULL,
    delivered_finished_at = NULL, delivered_trace_id = NULL, delivered_token = NULL, delivered_receipt = NULL
FROM r WHERE o.id = r.id{{end}}

-- admin.oldest_pending reads the age in seconds of the oldest PENDING event.
{{define "admin.oldest_pending"}}SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 FROM "{{.Outbox}}" WHERE status = 'PENDING'{{end}}

{{define "admin.dead_letter_count"}}SELECT count(*) FROM "{{.DeadLetters}}" WHERE requeued_at IS NULL{{end}}

-- admin.list_events and admin.get_event read records; admin.count_matching
-- and admin.select_matching are the fixed heads of statements whose WHERE
-- is written from a filter's fixed fragments and bind parameters.
{{define "admin.list_events"}}SELECT {{template "admin.record_columns" .}}{{template "admin.record_from" .}}{{end}}

{{define "admin.get_event"}}SELECT {{template "admin.record_columns" .}}{{template "admin.record_from" .}} WHERE o.event_id = $1::uuid{{end}}

{{define "admin.count_matching"}}SELECT count(*) FROM "{{.Outbox}}" WHERE {{end}}

{{define "admin.select_matching"}}SELECT id, event_id FROM "{{.Outbox}}" WHERE {{end}}

{{define "admin.operator_requeue_dead"}}UPDATE "{{.DeadLetters}}" SET requeued_at = now() WHERE outbox_id = $1 AND requeued_at IS NULL{{end}}

-- admin.claimed holds when a claim in flight holds the row whose id column
-- is %[1]s (the admin queries' status: a PENDING row a claim holds reads
-- PROCESSING); admin.held is written before a condition on the FAILED or
-- BLOCKED status, to read the hold index of those rows.
{{define "admin.claimed"}}EXISTS (SELECT 1 FROM "{{.Outbox}}_claims" c WHERE %[1]s = ANY(c.ids)){{end}}

{{define "admin.held"}}hold = 2 AND {{end}}

-- admin.move_batch_delivery copies the delivery of row $1 recorded per batch
-- in the deliveries table (found by the row's processed_at) into the
-- attempts table, before a replay clears processed_at; a step run again
-- writes nothing twice.
{{define "admin.move_batch_delivery"}}
INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, trace_id, receipt)
SELECT o.event_id, d.token, 'DELIVERED', o.id, o.retry_count + 1, d.relay_id, d.started_at, d.finished_at,
    NULLIF(d.trace_ids[array_position(d.ids, o.id)], ''), o.delivered_receipt
FROM "{{.Outbox}}" o JOIN "{{.Outbox}}_deliveries" d ON d.completed_at = o.processed_at AND o.lane = ANY(d.lanes)
    AND (d.ids IS NULL OR o.id = ANY(d.ids))
WHERE o.id = $1 AND o.status = 'PROCESSED'
ON CONFLICT DO NOTHING{{end}}

-- admin.count_attempt counts the delivery of row $1 as an attempt, before a
-- replay, once move_batch_delivery has copied it with its receipt: the next
-- delivery is numbered after it and records its own receipt.
{{define "admin.count_attempt"}}UPDATE "{{.Outbox}}" SET retry_count = retry_count + 1, delivered_receipt = NULL WHERE id = $1{{end}}

-- admin.replay_aggregates is the head of the statement that pages through the
-- aggregates that have events a replay matches (its WHERE follows).
{{define "admin.replay_aggregates"}}SELECT DISTINCT aggregate_type, aggregate_id FROM "{{.Outbox}}" WHERE {{end}}

-- admin.replay_rows is the head of the statement that locks the events of
-- one aggregate a replay matches (its WHERE follows).
{{define "admin.replay_rows"}}SELECT id, event_id::text FROM "{{.Outbox}}" WHERE {{end}}

-- admin.replay_held returns the first event of aggregate ($1, $2) that holds
-- a replay back: PROCESSING (a PENDING row a claim holds, or a row under a
-- lease of the schema before lanes), FAILED or BLOCKED.
{{define "admin.replay_held"}}SELECT o.event_id::text, CASE WHEN o.status = 'PENDING' THEN 'PROCESSING' ELSE o.status END
FROM "{{.Outbox}}" o WHERE o.aggregate_type = $1 AND o.aggregate_id = $2
    AND (o.status IN ('PROCESSING', 'FAILED', 'BLOCKED')
        OR (o.status = 'PENDING' AND EXISTS (SELECT 1 FROM "{{.Outbox}}_claims" c WHERE o.id = ANY(c.ids))))
ORDER BY o.id LIMIT 1{{end}}
