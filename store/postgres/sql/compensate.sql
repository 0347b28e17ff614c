-- compensate.expire ends waiting events past their deadline and returns them
-- (expiredColumns), for their compensating events to be enqueued in the
-- same transaction.
{{define "compensate.expire"}}
WITH r AS (
    SELECT id, event_id, retry_count, expires_at FROM "{{.Outbox}}" o
    WHERE hold > 0 AND expires_at IS NOT NULL AND expires_at <= now() AND status IN ('PENDING', 'BLOCKED')
      AND NOT EXISTS (SELECT 1 FROM "{{.Outbox}}_claims" c WHERE o.id = ANY(c.ids))
    ORDER BY expires_at LIMIT $1
    FOR NO KEY UPDATE SKIP LOCKED
),
u AS (
    UPDATE "{{.Outbox}}" o SET status = 'EXPIRED', hold = 0, processed_at = now(),
        last_error = 'expired before delivery: deadline was ' ||
            to_char(r.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
    FROM r WHERE o.id = r.id
    RETURNING o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
        o.expires_at, o.retry_count, o.on_expired, o.last_error
),
att AS (
    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
    SELECT u.event_id, gen_random_uuid(), 'EXPIRED', u.id, u.retry_count + 1, $2, now(), now(), u.last_error
    FROM u
)
SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, expires_at, retry_count, on_expired FROM u{{end}}

-- compensate.attempts records the compensations written for expired
-- events ($1, with their tokens $2, rows $3, attempts $4 and notes $5) by
-- relay $6, once each.
{{define "compensate.attempts"}}INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
        SELECT e, t, 'COMPENSATED', o, a, $6, now(), now(), n
        FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::int[], $5::text[]) AS x(e, t, o, a, n)
        ON CONFLICT DO NOTHING{{end}}

-- compensate.existing_events reads which of the event ids $1 exist already.
{{define "compensate.existing_events"}}SELECT event_id FROM "{{.Outbox}}" WHERE event_id = ANY($1::uuid[]){{end}}
