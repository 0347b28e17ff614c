-- The completion of a claim (complete.go), in one BEGIN IMMEDIATE
-- transaction; "now" (?1 where named) is the database clock read once at
-- its start. The plan (store/internal/completion) decides what each row
-- becomes; these statements write it. Rendered with the table names and
-- TS, the strftime format of stored timestamps.

-- complete.claim_row reads the claim ? : its lanes, their tokens and its
-- ids (JSON arrays).
{{define "complete.claim_row"}}SELECT lanes, lane_tokens, ids FROM "{{.Outbox}}_claims" WHERE token = ?{{end}}

-- complete.claim_ids sets the ids left in claim ?1 to ?2 (JSON).
{{define "complete.claim_ids"}}UPDATE "{{.Outbox}}_claims" SET ids = ?2 WHERE token = ?1{{end}}

-- complete.update is the guarded state change: ?1 is now, ?2 the claim
-- token, ?3 the rows as a JSON array of objects (the plan's changes), ?4
-- the relay; the fence: a row changes only while PENDING, in the claim
-- (?5, its ids) and in a lane still held under the claim's token (?6). A
-- delivery marked d is recorded on the row (migration 00006): the relay,
-- the claim token, the attempt number, the times (now when absent), the
-- trace id and the receipt.
{{define "complete.update"}}
WITH i AS MATERIALIZED (
    SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.status') AS status,
        json_extract(value, '$.add') AS add_retry, json_extract(value, '$.fin') AS fin,
        json_extract(value, '$.retry') AS retry, json_extract(value, '$.set_err') AS set_err,
        json_extract(value, '$.err') AS err, COALESCE(json_extract(value, '$.d'), 0) AS d,
        json_extract(value, '$.attempt') AS attempt, COALESCE(json_extract(value, '$.started'), ?1) AS started,
        COALESCE(json_extract(value, '$.finished'), ?1) AS finished, json_extract(value, '$.trace_id') AS trace_id,
        json_extract(value, '$.receipt') AS receipt
    FROM json_each(?3)
)
UPDATE "{{.Outbox}}" AS o SET
    status = i.status,
    retry_count = o.retry_count + i.add_retry,
    processed_at = CASE WHEN i.fin THEN ?1 END,
    available_at = CASE WHEN i.retry IS NOT NULL THEN strftime({{.TS}}, ?1, i.retry) ELSE o.available_at END,
    last_error = CASE WHEN i.set_err THEN i.err ELSE o.last_error END,
    delivered_relay_id = CASE WHEN i.d THEN ?4 ELSE o.delivered_relay_id END,
    delivered_attempt = CASE WHEN i.d THEN i.attempt ELSE o.delivered_attempt END,
    delivered_started_at = CASE WHEN i.d THEN i.started ELSE o.delivered_started_at END,
    delivered_finished_at = CASE WHEN i.d THEN i.finished ELSE o.delivered_finished_at END,
    delivered_trace_id = CASE WHEN i.d THEN i.trace_id ELSE o.delivered_trace_id END,
    delivered_token = CASE WHEN i.d THEN ?2 ELSE o.delivered_token END,
    delivered_receipt = CASE WHEN i.d THEN i.receipt ELSE o.delivered_receipt END,
    locked_until = NULL,
    lock_token = NULL
FROM i
WHERE o.id = i.id AND o.status = 'PENDING' AND o.id IN (SELECT value FROM json_each(?5))
  AND o.lane IN (SELECT value FROM json_each(?6))
RETURNING id, aggregate_type, aggregate_id, status, available_at{{end}}

-- complete.dead_letter records a newly FAILED row (?1) with its reason ?2
-- at ?3.
{{define "complete.dead_letter"}}
INSERT INTO "{{.DeadLetters}}" (outbox_id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, reason, failed_at)
SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, ?2, ?3
FROM "{{.Outbox}}" WHERE id = ?1{{end}}

-- complete.block_after holds the PENDING rows after a newly FAILED row ?3
-- of aggregate (?1, ?2) as BLOCKED; ?4 lists (JSON) the rows this
-- completion itself changed, which PostgreSQL's single statement does not
-- see as PENDING either. queries.unfinished names the partial index's
-- condition, which SQLite uses only when the query names it.
{{define "complete.block_after"}}
UPDATE "{{.Outbox}}" SET status = 'BLOCKED'
WHERE aggregate_type = ?1 AND aggregate_id = ?2 AND id > ?3 AND status = 'PENDING' AND {{template "queries.unfinished" .}}
  AND id NOT IN (SELECT value FROM json_each(?4)) AND id NOT IN ({{template "queries.busy" .}}){{end}}

-- complete.defer pushes back the PENDING rows after a retried row ?3 of
-- aggregate (?1, ?2) to its new available_at ?4; ?5 as in
-- complete.block_after.
{{define "complete.defer"}}
UPDATE "{{.Outbox}}" SET available_at = ?4
WHERE aggregate_type = ?1 AND aggregate_id = ?2 AND id > ?3 AND status = 'PENDING' AND {{template "queries.unfinished" .}}
  AND available_at < ?4 AND id NOT IN (SELECT value FROM json_each(?5)) AND id NOT IN ({{template "queries.busy" .}}){{end}}

-- complete.insert_attempts writes one attempt row per element of ?3 (claim
-- token ?1, relay ?2); a replay conflicts and writes nothing, and so does
-- the replay of a delivery recorded on its row (marked replay: the row is
-- PROCESSED with its delivery under ?1).
{{define "complete.insert_attempts"}}
INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error, trace_id, receipt)
SELECT json_extract(value, '$.event_id'), ?1, json_extract(value, '$.kind'), json_extract(value, '$.id'),
    json_extract(value, '$.attempt'), ?2, json_extract(value, '$.started'), json_extract(value, '$.finished'),
    json_extract(value, '$.error'), json_extract(value, '$.trace_id'), json_extract(value, '$.receipt')
FROM json_each(?3)
WHERE NOT (COALESCE(json_extract(value, '$.replay'), 0) AND EXISTS (SELECT 1 FROM "{{.Outbox}}" p
    WHERE p.id = json_extract(value, '$.id') AND p.status = 'PROCESSED' AND p.delivered_token = ?1))
ON CONFLICT DO NOTHING{{end}}

-- complete.expired_rows reads the rows of ?1 (JSON ids, just moved to
-- EXPIRED) that have a compensating event to enqueue.
{{define "complete.expired_rows"}}
SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, expires_at, retry_count, on_expired
FROM "{{.Outbox}}" WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'EXPIRED' AND on_expired IS NOT NULL
ORDER BY id{{end}}
