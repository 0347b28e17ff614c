-- The sweeper's statements (sweep.go).

-- sweep.all_claims reads the claims in flight, oldest first, at most ?.
{{define "sweep.all_claims"}}SELECT token, lanes, lane_tokens, ids FROM "{{.Outbox}}_claims" ORDER BY created_ms LIMIT ?{{end}}

-- sweep.dead_claim_rows reads the rows of ?1 (JSON ids) of a claim whose
-- relay is gone.
{{define "sweep.dead_claim_rows"}}SELECT id, event_id, retry_count FROM "{{.Outbox}}" WHERE id IN (SELECT value FROM json_each(?)){{end}}

-- sweep.reap_select finds a page of PROCESSING rows whose lease ended (?1
-- now, ?2 page size), with the claim token they had.
{{define "sweep.reap_select"}}
SELECT id, event_id, lock_token, retry_count, replace(locked_until, ' ', 'T') || 'Z' FROM "{{.Outbox}}"
WHERE status = 'PROCESSING' AND locked_until < ?1
ORDER BY id LIMIT ?2{{end}}

-- sweep.reap_update returns the rows of ?1 (JSON ids) to PENDING, keeping
-- retry_count.
{{define "sweep.reap_update"}}
UPDATE "{{.Outbox}}" SET status = 'PENDING', locked_until = NULL, lock_token = NULL
WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'PROCESSING'{{end}}

-- sweep.audit writes one attempt row at now (?7) for the sweeper (and the
-- operator, and the expiry); a replay writes nothing.
{{define "sweep.audit"}}
INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)
ON CONFLICT DO NOTHING{{end}}

-- sweep.block moves a page (?1) of PENDING events that wait behind a
-- FAILED event of their aggregate to BLOCKED.
{{define "sweep.block"}}
UPDATE "{{.Outbox}}" SET status = 'BLOCKED'
WHERE id IN (
    SELECT o.id FROM "{{.Outbox}}" o
    JOIN (SELECT aggregate_type, aggregate_id, min(id) AS id FROM "{{.Outbox}}" WHERE status = 'FAILED'
          GROUP BY aggregate_type, aggregate_id) f
      ON f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id
    WHERE o.status = 'PENDING' AND o.{{template "queries.unfinished" .}} AND o.id > f.id AND o.id NOT IN ({{template "queries.busy" .}})
    ORDER BY o.id LIMIT ?1){{end}}

-- sweep.unblock returns a page (?1) of BLOCKED events with no FAILED event
-- before them (or all of them when FAILED events do not block, ?2 false)
-- to PENDING.
{{define "sweep.unblock"}}
UPDATE "{{.Outbox}}" SET status = 'PENDING'
WHERE id IN (
    SELECT o.id FROM "{{.Outbox}}" o
    WHERE o.status = 'BLOCKED' AND (NOT ?2 OR NOT EXISTS (
        SELECT 1 FROM "{{.Outbox}}" f WHERE f.status = 'FAILED'
          AND f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id AND f.id < o.id))
    ORDER BY o.id LIMIT ?1){{end}}

-- sweep.count_movable counts PROCESSING rows and PENDING rows not held
-- back by a FAILED event (when ?1), as two counts so that each reads its
-- partial index instead of the whole table.
{{define "sweep.count_movable"}}
SELECT (SELECT count(*) FROM "{{.Outbox}}" WHERE status = 'PROCESSING')
     + (SELECT count(*) FROM "{{.Outbox}}" o WHERE o.status = 'PENDING' AND NOT (?1 AND EXISTS (
          SELECT 1 FROM "{{.Outbox}}" f WHERE f.status = 'FAILED'
            AND f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id AND f.id < o.id))){{end}}
