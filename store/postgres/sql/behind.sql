-- behind.id_order reads what the lanes' horizon trusts of the outbox: its id
-- sequence (cache, increment, cycle) and whether the insert trigger that
-- draws the ids fires. No row when the table or its sequence is missing.
{{define "behind.id_order"}}
SELECT x.seq::text, s.seqcache, s.seqincrement, s.seqcycle,
    COALESCE((SELECT t.tgenabled::text FROM pg_trigger t
              WHERE t.tgrelid = x.tbl AND t.tgname = '{{.Outbox}}_before_insert'), '')
FROM (SELECT tbl, pg_get_serial_sequence(tbl::text, 'id')::regclass AS seq
      FROM to_regclass('"{{.Outbox}}"') AS tbl WHERE tbl IS NOT NULL) x
JOIN pg_sequence s ON s.seqrelid = x.seq{{end}}

-- behind.scan is a pass of the safety net: per lane ($1, cursors $2,
-- sweeps from $3, recent reads down to $7), r the last $4 rows of hold 0
-- below the cursor and at or above the recent read's floor, and w the
-- next $5 from the sweep's position (the lane index both, in its order:
-- w's scan is open-ended like the claim's, so that it is read in index
-- order and stops at $5 rows rather than fetching the whole range); the
-- PENDING ones below the cursor among them, and at most $6 PENDING rows
-- without a lane (written past the insert trigger), get hold 1 (and a
-- lane), so that the claim reads them by their due time. It returns those
-- rows (part 0) and, per lane whose sweep read $5 rows all below the
-- cursor, the last id it read (part 1).
{{define "behind.scan"}}
WITH l AS (
    SELECT * FROM unnest($1::int[], $2::bigint[], $3::bigint[], $7::bigint[]) AS l(lane, cur, lo, rlo)
),
r AS MATERIALIZED (
    SELECT l.lane, e.id, e.status FROM l CROSS JOIN LATERAL (
        SELECT o.id, o.status FROM "{{.Outbox}}" o
        WHERE o.lane = l.lane AND o.id < l.cur AND o.id >= l.rlo AND o.hold = 0
        ORDER BY o.lane DESC, o.id DESC LIMIT $4
    ) e
),
w AS MATERIALIZED (
    SELECT l.lane, l.cur, e.id, e.status FROM l CROSS JOIN LATERAL (
        SELECT o.id, o.status FROM "{{.Outbox}}" o
        WHERE o.lane = l.lane AND o.id >= l.lo AND o.hold = 0
        ORDER BY o.lane, o.id LIMIT $5
    ) e
),
passed AS (
    UPDATE "{{.Outbox}}" o SET hold = 1
    WHERE o.id IN (SELECT id FROM r WHERE status = 'PENDING'
                   UNION SELECT id FROM w WHERE status = 'PENDING' AND id < cur)
      AND o.hold = 0 AND o.status = 'PENDING'
    RETURNING o.lane, o.id, o.event_id
),
loose AS (
    UPDATE "{{.Outbox}}" o SET hold = 1, lane = COALESCE(
        (SELECT a.lane FROM "{{.Outbox}}_aggregates" a
         WHERE a.aggregate_type = o.aggregate_type AND a.aggregate_id = o.aggregate_id),
        get_byte(decode(md5(o.aggregate_type || ':' || o.aggregate_id), 'hex'), 0) % 64)
    WHERE o.id IN (SELECT n.id FROM "{{.Outbox}}" n WHERE n.lane IS NULL AND n.status = 'PENDING'
                   ORDER BY n.lane, n.id LIMIT $6)
      AND o.lane IS NULL AND o.status = 'PENDING'
    RETURNING o.lane, o.id, o.event_id
)
SELECT 0, lane, id, event_id::text FROM passed
UNION ALL SELECT 0, lane, id, event_id::text FROM loose
UNION ALL SELECT 1, lane, max(id), '' FROM w GROUP BY lane HAVING count(*) >= $5 AND max(id) < min(cur){{end}}
