--- complete.fence is the fence of every completion ($1 the claim's token):
-- c, the claim's row; v, its lanes still held under the tokens it was made
-- under, share-locked so that a balance cannot take them until this
-- commits; mine, the claim's ids while any lane is held.
{{define "complete.fence"}}c AS MATERIALIZED (
    SELECT lanes, lane_tokens, ids FROM "{{.Outbox}}_claims" WHERE token = $1::uuid
),
v AS MATERIALIZED (
    SELECT l.lane FROM c CROSS JOIN LATERAL unnest(c.lanes, c.lane_tokens) AS f(lane, token)
    JOIN "{{.Outbox}}_lanes" l ON l.lane = f.lane AND l.token = f.token
    WHERE l.lease_until_ms > (extract(epoch FROM now()) * 1000)::bigint
    ORDER BY l.lane
    FOR SHARE OF l
),
mine AS MATERIALIZED (
    SELECT unnest(ids) AS id FROM c WHERE EXISTS (SELECT 1 FROM v)
),{{end}}

- The completion of a claim (complete.go) in one statement. The plan
-- (store/internal/completion) decides what each row becomes and passes it
-- as arrays; these statements write it.
--
-- complete.rows applies a batch under one claim token ($1; $2 the relay,
-- $3 FailedBlocks). i are the outcomes, in the request's order ($4 ids,
-- $5 event ids, $6 kinds, $7 error texts, $8 attempted, $9 attempt
-- numbers, $10 and $11 the times, $12 trace ids, $25 delivered on the row,
-- $26 the audit text of a fenced outcome, $27 the receipts, NULL for
-- none); r the rows, one each ($13, in
-- id order), with what each becomes ($14 status, $15 retry_count added,
-- $16 processed_at set, $17 available_at in milliseconds from now or NULL
-- to keep it, $18 last_error or NULL to keep it, $19 the dead letter's
-- reason or NULL for none, $20 pushes back its aggregate, $21 delivered on
-- the row, $22 to $24 its times and trace id, $28 the receipt of a
-- delivery recorded on the row). The fence: v, the claim's
-- lanes still held under the tokens it was made under (a share lock on
-- those lane rows keeps a balance from taking them until this commits),
-- and the rows must be the claim's own (mine) and still PENDING. Then: the
-- state change; dead letters; BLOCKED for the waiting events of the
-- aggregates of new dead letters (when $3); a pushed-back available_at for
-- the waiting events of retried aggregates (neither touches rows another
-- claim holds); one attempt row per attempted outcome that was not
-- delivered on its row (a replay conflicts and writes nothing); one row
-- in the deliveries table per start and finish time of the delivered
-- events (their audit: the lanes of the events, which are the PROCESSED
-- rows of those lanes whose processed_at is now(), and only when some
-- event carries a trace id, the events and their trace ids); and the
-- claim's row loses the rows completed (and goes when none is left).
--
-- "(x IN (SELECT ...)) IS TRUE" keeps the membership test a hashed
-- subquery: as a plain IN it becomes a join, which PostgreSQL, expecting
-- 10 rows of each unnest, plans as a nested loop over 1,000 x 1,000 rows.
--
-- hold follows the new status (0 for a final one, 2 for FAILED and
-- BLOCKED, 1 for PENDING), and stays 0 for a delivered row that had it:
-- no index names the columns a delivery changes, so the update is HOT. A
-- replayed delivery is recognised by its claim's row in the deliveries
-- table (the event is PROCESSED at that row's time) and writes nothing
-- either; a delivery that carries an error text (a sink's note) keeps its
-- attempt row, so that the text is kept too.
{{define "complete.rows"}}
WITH i AS (
    SELECT * FROM unnest($4::bigint[], $5::uuid[], $6::text[], $7::text[], $8::bool[], $9::int[],
                         $10::timestamptz[], $11::timestamptz[], $12::text[], $25::bool[], $26::text[], $27::text[])
        AS i(id, event_id, kind, err, attempted, attempt, started_at, finished_at, trace_id, on_row, lost_err, receipt)
),
{{template "complete.fence" .}}
u AS (
    UPDATE "{{.Outbox}}" o SET
        status = r.status,
        hold = CASE WHEN r.status IN ('PROCESSED', 'EXPIRED') THEN 0
            WHEN r.status IN ('FAILED', 'BLOCKED') THEN 2 ELSE 1 END,
        retry_count = o.retry_count + r.add_retry,
        processed_at = CASE WHEN r.finish THEN now() END,
        available_at = COALESCE(now() + r.retry_ms * interval '1 millisecond', o.available_at),
        last_error = COALESCE(r.last_error, o.last_error),
        delivered_receipt = CASE WHEN r.on_row THEN r.receipt ELSE o.delivered_receipt END
    FROM unnest($13::bigint[], $14::text[], $15::int[], $16::bool[], $17::bigint[], $18::text[], $19::text[],
                $20::bool[], $21::bool[], $22::timestamptz[], $23::timestamptz[], $24::text[], $28::text[])
        AS r(id, status, add_retry, finish, retry_ms, last_error, reason, push, on_row, started_at, finished_at, trace_id, receipt)
    WHERE o.id = r.id AND o.status = 'PENDING'
      AND (r.id IN (SELECT id FROM mine)) IS TRUE AND o.lane = ANY(ARRAY(SELECT lane FROM v))
    RETURNING o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
        o.retry_count, o.status, o.available_at, r.reason, r.push, o.expires_at, o.on_expired,
        r.on_row, r.started_at, r.finished_at, r.trace_id, o.lane
),
busy AS MATERIALIZED (
    SELECT DISTINCT unnest(ids) AS id FROM "{{.Outbox}}_claims"
),
dl AS (
    INSERT INTO "{{.DeadLetters}}" (outbox_id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, reason)
    SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, reason
    FROM u WHERE reason IS NOT NULL
),
blk AS (
    UPDATE "{{.Outbox}}" o SET status = 'BLOCKED', hold = 2
    FROM (SELECT aggregate_type, aggregate_id, min(id) AS id FROM u WHERE reason IS NOT NULL GROUP BY 1, 2) f
    WHERE $3::bool AND o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
      AND o.id > f.id AND o.status = 'PENDING' AND o.id NOT IN (SELECT id FROM busy)
),
dfr AS (
    UPDATE "{{.Outbox}}" o SET available_at = r.available_at, hold = 1
    FROM (SELECT aggregate_type, aggregate_id, min(id) AS id, max(available_at) AS available_at
          FROM u WHERE push GROUP BY 1, 2) r
    WHERE o.aggregate_type = r.aggregate_type AND o.aggregate_id = r.aggregate_id
      AND o.id > r.id AND o.status = 'PENDING' AND (o.available_at < r.available_at OR o.hold = 0)
      AND o.id NOT IN (SELECT id FROM busy)
),
att AS (
    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error, trace_id, receipt)
    SELECT i.event_id, $1::uuid, i.kind, i.id, i.attempt, $2, i.started_at, i.finished_at,
        CASE WHEN u.id IS NULL THEN i.lost_err ELSE NULLIF(i.err, '') END,
        NULLIF(i.trace_id, ''), i.receipt
    FROM i LEFT JOIN u ON u.id = i.id
    WHERE i.attempted AND NOT (i.on_row AND (COALESCE(u.on_row, false) OR EXISTS (
        SELECT 1 FROM "{{.Outbox}}_deliveries" d JOIN "{{.Outbox}}" p ON p.id = i.id
        WHERE d.token = $1::uuid AND p.status = 'PROCESSED' AND p.processed_at = d.completed_at)))
    ON CONFLICT DO NOTHING
),
dlv AS (
    INSERT INTO "{{.Outbox}}_deliveries" (token, relay_id, completed_at, started_at, finished_at, lanes, delivered, ids, trace_ids)
    SELECT $1::uuid, $2, now(), u.started_at, u.finished_at, array_agg(DISTINCT u.lane), count(*),
        CASE WHEN bool_or(COALESCE(u.trace_id, '') <> '') THEN array_agg(u.id ORDER BY u.id) END,
        CASE WHEN bool_or(COALESCE(u.trace_id, '') <> '') THEN array_agg(NULLIF(u.trace_id, '') ORDER BY u.id) END
    FROM u
    WHERE u.on_row
    GROUP BY u.started_at, u.finished_at
),
cd AS (
    DELETE FROM "{{.Outbox}}_claims" WHERE token = $1::uuid AND (ids = $13::bigint[] OR ids <@ $4::bigint[]) AND EXISTS (SELECT 1 FROM v)
),
cu AS (
    UPDATE "{{.Outbox}}_claims" SET ids = ARRAY(SELECT x FROM unnest(ids) AS x WHERE x <> ALL($4::bigint[]) ORDER BY x)
    WHERE token = $1::uuid AND NOT (ids = $13::bigint[] OR ids <@ $4::bigint[]) AND EXISTS (SELECT 1 FROM v)
){{end}}

-- complete.any is complete.rows returning the applied ids.
{{define "complete.any"}}{{template "complete.rows" .}}
SELECT id FROM u{{end}}

-- complete.expiring is complete.rows for a batch with EXPIRED outcomes:
-- the applied rows come back as expiredColumns (compensate.go), the
-- payload and headers only for rows with a compensating event to enqueue.
{{define "complete.expiring"}}{{template "complete.rows" .}}
SELECT id, event_id, aggregate_type, aggregate_id, event_type,
    CASE WHEN c THEN payload END, CASE WHEN c THEN headers END, expires_at, retry_count,
    CASE WHEN c THEN on_expired END
FROM (SELECT *, (status = 'EXPIRED' AND on_expired IS NOT NULL) AS c FROM u) u{{end}}

-- complete.delivered is complete.any for the common batch: every outcome
-- delivered on its row, without a trace id, sent in one call ($4 started,
-- $5 finished). $3 are the rows, $6 their event ids and $7 their attempt
-- numbers; $8 the rows sorted (the claim's ids when the batch is whole:
-- the claim's row is then deleted without comparing element by element);
-- $9 the audit text of a fenced outcome; $10 their receipts, or NULL when
-- the sink recorded none (delivered_receipt then stays NULL: the row
-- version written is the one written before receipts). The fence, the
-- audit of a fenced
-- or replayed outcome and the claim's bookkeeping are those of
-- complete.rows.
{{define "complete.delivered"}}
WITH {{template "complete.fence" .}}
u AS (
    UPDATE "{{.Outbox}}" o SET status = 'PROCESSED', hold = 0, processed_at = now(), delivered_receipt = i.receipt
    FROM unnest($3::bigint[], $10::text[]) AS i(id, receipt)
    WHERE o.id = i.id AND o.status = 'PENDING'
      AND (i.id IN (SELECT id FROM mine)) IS TRUE AND o.lane = ANY(ARRAY(SELECT lane FROM v))
    RETURNING o.id, o.lane
),
att AS (
    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error, receipt)
    SELECT i.event_id, $1::uuid, 'DELIVERED', i.id, i.attempt, $2, $4, $5, $9, i.receipt
    FROM unnest($3::bigint[], $6::uuid[], $7::int[], $10::text[]) AS i(id, event_id, attempt, receipt)
    WHERE i.id NOT IN (SELECT id FROM u) AND NOT EXISTS (
        SELECT 1 FROM "{{.Outbox}}_deliveries" d JOIN "{{.Outbox}}" p ON p.id = i.id
        WHERE d.token = $1::uuid AND p.status = 'PROCESSED' AND p.processed_at = d.completed_at)
    ON CONFLICT DO NOTHING
),
dlv AS (
    INSERT INTO "{{.Outbox}}_deliveries" (token, relay_id, completed_at, started_at, finished_at, lanes, delivered)
    SELECT $1::uuid, $2, now(), $4, $5, array_agg(DISTINCT lane), count(*) FROM u HAVING count(*) > 0
),
cd AS (
    DELETE FROM "{{.Outbox}}_claims" WHERE token = $1::uuid AND (ids = $8::bigint[] OR ids <@ $3::bigint[]) AND EXISTS (SELECT 1 FROM v)
),
cu AS (
    UPDATE "{{.Outbox}}_claims" SET ids = ARRAY(SELECT x FROM unnest(ids) AS x WHERE x <> ALL($3::bigint[]) ORDER BY x)
    WHERE token = $1::uuid AND NOT (ids = $8::bigint[] OR ids <@ $3::bigint[]) AND EXISTS (SELECT 1 FROM v)
)
SELECT id FROM u{{end}}
