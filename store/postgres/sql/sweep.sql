-- sweep.reap returns rows PROCESSING under a lease of the previous schema
-- (before lanes) whose lease ended to PENDING, keeping retry_count, and
-- audits each with the claim token it had.
{{define "sweep.reap"}}
WITH r AS (
    SELECT id, event_id, lock_token, retry_count, locked_until FROM "{{.Outbox}}"
    WHERE lock_token IS NOT NULL AND status = 'PROCESSING' AND locked_until < now()
    ORDER BY locked_until LIMIT $1
    FOR NO KEY UPDATE SKIP LOCKED
),
u AS (
    UPDATE "{{.Outbox}}" o SET status = 'PENDING', locked_until = NULL, lock_token = NULL
    FROM r WHERE o.id = r.id
    RETURNING o.id
),
att AS (
    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
    SELECT r.event_id, COALESCE(r.lock_token, gen_random_uuid()), 'LEASE_EXPIRED', r.id, r.retry_count + 1, $2, now(), now(),
        'lease ended at ' || to_char(r.locked_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') ||
        ' without a result; returned to PENDING'
    FROM r JOIN u ON u.id = r.id
    ON CONFLICT DO NOTHING
)
SELECT count(*) FROM u{{end}}

-- sweep.reap_claims ends the claims whose lanes are all gone (their relay's
-- lease ended, or another relay took them): each of their rows (those the
-- claim's relay did not complete) is audited LEASE_EXPIRED under the
-- claim's token, whatever became of it since (the lane's new holder may
-- have delivered it already), and the claim's row is deleted. Their
-- events are PENDING as they were; the lanes' new holders deliver them.
{{define "sweep.reap_claims"}}
WITH dead AS (
    SELECT c.token, c.ids FROM "{{.Outbox}}_claims" c
    WHERE NOT EXISTS (
        SELECT 1 FROM unnest(c.lanes, c.lane_tokens) AS f(lane, token)
        JOIN "{{.Outbox}}_lanes" l ON l.lane = f.lane AND l.token = f.token
        WHERE l.lease_until_ms > (extract(epoch FROM now()) * 1000)::bigint)
    ORDER BY c.created_ms LIMIT $1
    FOR UPDATE OF c SKIP LOCKED
),
del AS (
    DELETE FROM "{{.Outbox}}_claims" c USING dead WHERE c.token = dead.token
),
r AS MATERIALIZED (
    SELECT dead.token, o.id, o.event_id, o.retry_count
    FROM dead CROSS JOIN LATERAL unnest(dead.ids) AS x(id) JOIN "{{.Outbox}}" o ON o.id = x.id
),
att AS (
    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
    SELECT r.event_id, r.token, 'LEASE_EXPIRED', r.id, r.retry_count + 1, $2, now(), now(),
        'the lease of its lane ended without a result; returned to PENDING'
    FROM r
    ON CONFLICT DO NOTHING
)
SELECT count(*) FROM r{{end}}

-- sweep.block moves PENDING events that wait behind a FAILED event of their
-- aggregate to BLOCKED, but for those a claim holds.
{{define "sweep.block"}}
WITH f AS (
    SELECT aggregate_type, aggregate_id, min(id) AS id FROM "{{.Outbox}}"
    WHERE hold = 2 AND status = 'FAILED' GROUP BY 1, 2
),
r AS (
    SELECT o.id FROM "{{.Outbox}}" o JOIN f ON f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id
    WHERE o.status = 'PENDING' AND o.id > f.id
      AND NOT EXISTS (SELECT 1 FROM "{{.Outbox}}_claims" c WHERE o.id = ANY(c.ids))
    ORDER BY o.id LIMIT $1
    FOR NO KEY UPDATE OF o SKIP LOCKED
)
UPDATE "{{.Outbox}}" o SET status = 'BLOCKED', hold = 2 FROM r WHERE o.id = r.id{{end}}

-- sweep.unblock returns BLOCKED events with no FAILED event before them (or all
-- of them when FAILED events do not block, $2 = false) to PENDING.
{{define "sweep.unblock"}}
WITH r AS (
    SELECT o.id FROM "{{.Outbox}}" o
    WHERE o.hold = 2 AND o.status = 'BLOCKED' AND (NOT $2::bool OR NOT EXISTS (
        SELECT 1 FROM "{{.Outbox}}" f WHERE f.hold = 2 AND f.status = 'FAILED'
          AND f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id AND f.id < o.id))
    ORDER BY o.id LIMIT $1
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE "{{.Outbox}}" o SET status = 'PENDING', hold = 1 FROM r WHERE o.id = r.id{{end}}

-- sweep.count_movable counts the events a relay can still move: those PENDING
-- (held by a claim or not) but for those behind a FAILED event of their
-- aggregate (when $1), and those PROCESSING under a lease of the previous
-- schema. It reads the rows of hold 1 and, per lane, those of hold 0 from
-- the lane's stored cursor on, never the delivered rows before it.
{{define "sweep.count_movable"}}
WITH w AS (
    SELECT o.id, o.aggregate_type, o.aggregate_id FROM "{{.Outbox}}" o
    WHERE o.hold = 1 AND o.status = 'PENDING'
    UNION ALL
    SELECT x.id, x.aggregate_type, x.aggregate_id FROM "{{.Outbox}}_lanes" l CROSS JOIN LATERAL (
        SELECT o.id, o.aggregate_type, o.aggregate_id FROM "{{.Outbox}}" o
        WHERE o.lane = l.lane AND o.id >= l.next_id AND o.hold = 0 AND o.status IN ('PENDING', 'PROCESSING')) x
)
SELECT count(*) FROM w
WHERE NOT ($1::bool AND EXISTS (
    SELECT 1 FROM "{{.Outbox}}" f WHERE f.hold = 2 AND f.status = 'FAILED'
      AND f.aggregate_type = w.aggregate_type AND f.aggregate_id = w.aggregate_id AND f.id < w.id)){{end}}
