-- The claim's statements (claim.go). They run inside a BEGIN IMMEDIATE
-- transaction that already excludes every other writer; "now" is always a
-- parameter, the database clock read once at the start of the transaction.

-- claim.waiting_with_deadline repeats the WHERE clause of the expiry
-- index, which the claim's deadline part reads in (expires_at, id) order.
-- The part names the index (INDEXED BY): without statistics SQLite would
-- rather read every due row through the pending index and sort them, the
-- whole backlog on every claim.
{{define "claim.waiting_with_deadline"}}status IN ('PENDING', 'BLOCKED') AND expires_at IS NOT NULL{{end}}

-- claim.read reads a claim's rows (?1 now, ?2 the batch size, ?3 the
-- relay, ?4 its lanes as a JSON array, ?5 the deadline slots, ?6 its claims
-- in flight, ?7 FailedBlocks), as claim.read of the PostgreSQL backend:
--
--	busy: the ids of the relay's claims;
--	f:    the window, the first ?2 due PENDING rows of the lanes in
--	      (available_at, id) order, but for busy ones;
--	e:    the ?5 due PENDING rows with the nearest deadlines (the expiry
--	      index, named: without statistics SQLite would rather sort the
--	      whole backlog), but for busy ones;
--	w:    their aggregates, and per the length of their runs;
--	b:    per aggregate, the id of its per-th unfinished row (FAILED counts
--	      when ?7), NULL if it has fewer;
--
-- and the runs: each aggregate's first unfinished rows in id order.
{{define "claim.read"}}
WITH busy AS MATERIALIZED (
    SELECT j.value AS id FROM "{{.Outbox}}_claims" c, json_each(c.ids) j WHERE c.relay_id = ?3
),
f AS MATERIALIZED (
    SELECT id, lane, aggregate_type, aggregate_id, status, available_at FROM "{{.Outbox}}"
    WHERE status = 'PENDING' AND available_at <= ?1 AND lane IN (SELECT value FROM json_each(?4))
      AND id NOT IN (SELECT id FROM busy)
    ORDER BY available_at, id LIMIT ?2
),
e AS MATERIALIZED (
    SELECT id, lane, aggregate_type, aggregate_id, status, available_at FROM "{{.Outbox}}" INDEXED BY "{{.Outbox}}_expiry_idx"
    WHERE {{template "claim.waiting_with_deadline" .}} AND status = 'PENDING' AND available_at <= ?1
      AND lane IN (SELECT value FROM json_each(?4)) AND id NOT IN (SELECT id FROM busy)
    ORDER BY expires_at, id LIMIT ?5
),
w AS MATERIALIZED (
    SELECT DISTINCT aggregate_type, aggregate_id FROM (
        SELECT aggregate_type, aggregate_id FROM f UNION ALL SELECT aggregate_type, aggregate_id FROM e)
),
per AS MATERIALIZED (
    SELECT max(1, (?2 + count(*) - 1) / max(count(*), 1)) * (1 + ?6) AS n FROM w
),
b AS MATERIALIZED (
    SELECT w.aggregate_type, w.aggregate_id,
        (SELECT o.id FROM "{{.Outbox}}" o
          WHERE o.aggregate_type = w.aggregate_type AND o.aggregate_id = w.aggregate_id
            AND o.{{template "queries.unfinished" .}} AND (o.status <> 'FAILED' OR ?7)
          ORDER BY o.id LIMIT 1 OFFSET (SELECT n - 1 FROM per)) AS last_id
    FROM w
)
SELECT 0, id, lane, aggregate_type, aggregate_id, status, available_at FROM f
UNION ALL SELECT 1, id, lane, aggregate_type, aggregate_id, status, available_at FROM e
UNION ALL
SELECT 2, o.id, o.lane, o.aggregate_type, o.aggregate_id, o.status, o.available_at
FROM b JOIN "{{.Outbox}}" o ON o.aggregate_type = b.aggregate_type AND o.aggregate_id = b.aggregate_id
WHERE o.{{template "queries.unfinished" .}} AND (o.status <> 'FAILED' OR ?7) AND (b.last_id IS NULL OR o.id <= b.last_id){{end}}

-- claim.events reads the claimed rows (?2, a JSON array of ids) that are
-- still PENDING; ?1 is now.
{{define "claim.events"}}
SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers,
    retry_count, created_at, expires_at, (expires_at IS NOT NULL AND expires_at <= ?1), aggregate_seq
FROM "{{.Outbox}}" WHERE id IN (SELECT value FROM json_each(?2)) AND status = 'PENDING'{{end}}

-- claim.insert records a claim: token, relay, lanes, their tokens and ids
-- (JSON arrays).
{{define "claim.insert"}}
INSERT INTO "{{.Outbox}}_claims" (token, relay_id, lanes, lane_tokens, ids, created_ms)
VALUES (?, ?, ?, ?, ?, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)){{end}}

-- claim.defer gives the PENDING rows of ?1 (JSON ids, rows behind a head
-- in backoff) the head's available_at ?2, so that they leave the window.
{{define "claim.defer"}}
UPDATE "{{.Outbox}}" SET available_at = ?2
WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'PENDING' AND available_at < ?2{{end}}

-- claim.block marks the PENDING rows of ?1 (JSON ids, rows behind a FAILED
-- head) BLOCKED.
{{define "claim.block"}}
UPDATE "{{.Outbox}}" SET status = 'BLOCKED'
WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'PENDING'{{end}}

-- claim.delete deletes the record of claim ? (once completed or swept).
{{define "claim.delete"}}DELETE FROM "{{.Outbox}}_claims" WHERE token = ?{{end}}
