-- claim.read reads a claim's rows in one statement, writing nothing:
--
-- 	s:   per lane ($1, cursors $2, sizes $3), its unfinished rows of hold 0
-- 	     from the cursor on, in id order (the lane index);
-- 	busy: the ids of the relay's claims ($9);
-- 	p:   the due PENDING rows of hold 1 of the lanes, in (available_at, id)
-- 	     order, at most $4 (the due index), but for busy ones;
-- 	d:   the due PENDING rows of hold 1 with the nearest deadlines, at most
-- 	     $5 (the deadline index), but for busy ones;
-- 	win: the window: the first $4 of s (PENDING, not busy) and p in
-- 	     (available_at, id) order; a its aggregates and those of d, and n
-- 	     the length of their runs ($7 the batch size, $8 the relay's claims
-- 	     in flight: lanes.ReadQuery.RunLen);
-- 	r:   per aggregate, its run: its first n unfinished rows, those of hold
-- 	     1 and 2 (the held index; FAILED counts when $6) and those of hold 0
-- 	     from its lane's cursor on (the aggregate index), merged in id
-- 	     order;
--
-- It returns the window's rows that are in no run (part 0), the deadline
-- rows (2), the runs (3; 1 in the ninth column for a row also in the
-- window, which stands for its part-0 row), per lane what s read (5: the first id, in the eighth column the
-- number of rows, in the ninth the last id; for the cursors and the next
-- read's size), and, in the last row (4), the database clock and the
-- snapshot's xmin, for the lanes' horizon. The rows s read beyond the
-- window are not returned: the planner needs only the window.
{{define "claim.read"}}
WITH l AS (
    SELECT * FROM unnest($1::int[], $2::bigint[], $3::int[]) AS l(lane, cur, k)
),
s AS MATERIALIZED (
    SELECT l.lane, e.id, e.aggregate_type, e.aggregate_id, e.status, e.available_at
    FROM l CROSS JOIN LATERAL (
        SELECT o.id, o.aggregate_type, o.aggregate_id, o.status, o.available_at FROM "{{.Outbox}}" o
        WHERE o.lane = l.lane AND o.id >= l.cur AND o.hold = 0 AND o.status IN ('PENDING', 'PROCESSING')
        ORDER BY o.lane, o.id LIMIT l.k
    ) e
),
busy AS MATERIALIZED (
    SELECT unnest(ids) AS id FROM "{{.Outbox}}_claims" WHERE relay_id = $9
),
p AS MATERIALIZED (
    SELECT o.lane, o.id, o.aggregate_type, o.aggregate_id, o.status, o.available_at FROM "{{.Outbox}}" o
    WHERE o.hold = 1 AND o.available_at <= now() AND o.status = 'PENDING' AND o.lane = ANY($1::int[])
      AND o.id NOT IN (SELECT id FROM busy)
    ORDER BY o.available_at, o.id LIMIT $4
),
d AS MATERIALIZED (
    SELECT o.lane, o.id, o.aggregate_type, o.aggregate_id, o.status, o.available_at FROM "{{.Outbox}}" o
    WHERE o.hold > 0 AND o.expires_at IS NOT NULL AND o.available_at <= now() AND o.status = 'PENDING'
      AND o.lane = ANY($1::int[]) AND o.id NOT IN (SELECT id FROM busy)
    ORDER BY o.expires_at, o.id LIMIT $5
),
win AS MATERIALIZED (
    SELECT lane, id, aggregate_type, aggregate_id, available_at FROM (
        SELECT lane, id, aggregate_type, aggregate_id, available_at FROM s
        WHERE status = 'PENDING' AND id NOT IN (SELECT id FROM busy)
        UNION ALL SELECT lane, id, aggregate_type, aggregate_id, available_at FROM p) x
    ORDER BY available_at, id LIMIT $4
),
a AS MATERIALIZED (
    SELECT DISTINCT x.lane, x.aggregate_type, x.aggregate_id, l.cur FROM (
        SELECT lane, aggregate_type, aggregate_id FROM win
        UNION ALL SELECT lane, aggregate_type, aggregate_id FROM d) x
    JOIN l ON l.lane = x.lane
),
n AS (
    SELECT GREATEST(1, ceil($7::numeric / GREATEST(count(*), 1)))::int * (1 + $8::int) AS n FROM a
),
r AS MATERIALIZED (
    SELECT a.lane, e.id, a.aggregate_type, a.aggregate_id, e.status, e.available_at, e.hold
    FROM a CROSS JOIN n CROSS JOIN LATERAL (
        SELECT * FROM (
            (SELECT o.id, o.status, o.available_at, o.hold FROM "{{.Outbox}}" o
             WHERE o.aggregate_type = a.aggregate_type AND o.aggregate_id = a.aggregate_id AND o.hold > 0
               AND o.status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED') AND (o.status <> 'FAILED' OR $6::bool)
             ORDER BY o.aggregate_type, o.aggregate_id, o.id LIMIT n.n)
            UNION ALL
            (SELECT o.id, o.status, o.available_at, o.hold FROM "{{.Outbox}}" o
             WHERE o.aggregate_type = a.aggregate_type AND o.aggregate_id = a.aggregate_id AND o.id >= a.cur
               AND o.hold = 0 AND o.status IN ('PENDING', 'PROCESSING')
             ORDER BY o.aggregate_type, o.aggregate_id, o.id LIMIT n.n)
        ) x ORDER BY id LIMIT n.n
    ) e
)
SELECT 0, lane, id, aggregate_type, aggregate_id, 'PENDING', available_at, 0, 0::bigint FROM win
WHERE id NOT IN (SELECT id FROM r)
UNION ALL SELECT 2, lane, id, aggregate_type, aggregate_id, status, available_at, 1, 0 FROM d
UNION ALL SELECT 3, lane, id, aggregate_type, aggregate_id, status, available_at, hold,
    CASE WHEN id IN (SELECT id FROM win) THEN 1 ELSE 0 END FROM r
UNION ALL SELECT 5, lane, min(id), '', '', '', now(), count(*)::int, max(id) FROM s GROUP BY lane
UNION ALL SELECT 4, 0, 0, '', '', '', now(), 0, pg_snapshot_xmin(pg_current_snapshot())::text::bigint{{end}}

-- claim.claims reads the relay's claims in flight, and in its last row the id
-- sequence's last value (read before the claim read's snapshot is taken,
-- for the lanes' horizon: lanes.Snapshot) and 1 when the sequence hands out
-- ids out of the order of their transactions (a CACHE above 1, or counting
-- down), which the horizon must not trust.
{{define "claim.claims"}}SELECT token::text, lanes::int[], lane_tokens, ids FROM "{{.Outbox}}_claims" WHERE relay_id = $1
UNION ALL SELECT NULL, NULL, NULL, ARRAY[COALESCE(pg_sequence_last_value(x.seq), 0),
    COALESCE((SELECT CASE WHEN s.seqcache > 1 OR s.seqincrement < 1 THEN 1 ELSE 0 END FROM pg_sequence s WHERE s.seqrelid = x.seq), 0)]
FROM (SELECT pg_get_serial_sequence('"{{.Outbox}}"', 'id')::regclass AS seq) x{{end}}

-- claim.commit records a claim in one statement: f checks that every
-- lane of the claim ($3, with tokens $4) is still held with at least $5
-- ms of lease left; only then does it defer ($6 to $7) and block ($8) the
-- plan's rows, read the claimed rows ($9) that are still PENDING, and
-- insert the claim's row ($1, relay $2).
{{define "claim.commit"}}
WITH f AS MATERIALIZED (
    SELECT count(*) = cardinality($3::int[]) AS ok, min(l.lease_until_ms) AS until
    FROM "{{.Outbox}}_lanes" l JOIN unnest($3::int[], $4::bigint[]) AS f(lane, token) ON l.lane = f.lane AND l.token = f.token
    WHERE l.lease_until_ms > (extract(epoch FROM now()) * 1000)::bigint + $5::bigint
),
dfr AS (
    UPDATE "{{.Outbox}}" o SET available_at = GREATEST(o.available_at, x.at), hold = 1
    FROM unnest($6::bigint[], $7::timestamptz[]) AS x(id, at), f
    WHERE f.ok AND o.id = x.id AND o.status = 'PENDING'
),
blk AS (
    UPDATE "{{.Outbox}}" o SET status = 'BLOCKED', hold = 2 FROM f
    WHERE f.ok AND o.id = ANY($8::bigint[]) AND o.status = 'PENDING'
),
e AS MATERIALIZED (
    SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
        o.retry_count, o.created_at, o.expires_at, (o.expires_at IS NOT NULL AND o.expires_at <= now()) AS expired,
        o.aggregate_seq
    FROM unnest($9::bigint[]) AS i(id) JOIN "{{.Outbox}}" o ON o.id = i.id, f
    WHERE f.ok AND o.status = 'PENDING'
),
ins AS (
    INSERT INTO "{{.Outbox}}_claims" (token, relay_id, lanes, lane_tokens, ids, created_ms)
    SELECT $1::uuid, $2, $3::smallint[], $4::bigint[], ARRAY(SELECT id FROM e ORDER BY id),
        (extract(epoch FROM now()) * 1000)::bigint
    FROM f WHERE f.ok AND EXISTS (SELECT 1 FROM e)
)
SELECT f.ok, COALESCE(f.until, 0), now(), e.id, e.event_id, e.aggregate_type, e.aggregate_id, e.event_type, e.payload, e.headers,
    e.retry_count, e.created_at, e.expires_at, e.expired, e.aggregate_seq
FROM f LEFT JOIN e ON true{{end}}

-- claim.read_ids is claim.read for a window of given rows ($3), for a
-- source that learns of new events from the write-ahead log rather than by
-- scanning the lanes:
--
-- 	w: the given rows that are PENDING and due in the relay's lanes ($1,
-- 	   with their cursors $2). Rows are looked up by joining the ids to the
-- 	   table: a primary-key lookup per id.
-- 	a: their aggregates, and n the length of their runs ($4 the batch
-- 	   size, $6 the relay's claims in flight);
-- 	r: per aggregate, its first n unfinished rows: those of hold 1 and 2
-- 	   (the held index) and those of hold 0 from its lane's cursor on (the
-- 	   aggregate index), merged in id order; FAILED counts when $5.
{{define "claim.read_ids"}}
WITH l AS (
    SELECT * FROM unnest($1::int[], $2::bigint[]) AS l(lane, cur)
),
w AS MATERIALIZED (
    SELECT o.lane, o.id, o.aggregate_type, o.aggregate_id, o.status, o.available_at
    FROM unnest($3::bigint[]) AS i(id) JOIN "{{.Outbox}}" o ON o.id = i.id
    WHERE o.status = 'PENDING' AND o.available_at <= now() AND o.lane = ANY($1::int[])
),
a AS MATERIALIZED (
    SELECT DISTINCT w.lane, w.aggregate_type, w.aggregate_id, l.cur FROM w JOIN l ON l.lane = w.lane
),
n AS (
    SELECT GREATEST(1, ceil($4::numeric / GREATEST(count(*), 1)))::int * (1 + $6::int) AS n FROM a
),
r AS (
    SELECT a.lane, e.id, a.aggregate_type, a.aggregate_id, e.status, e.available_at, e.hold
    FROM a CROSS JOIN n CROSS JOIN LATERAL (
        SELECT * FROM (
            (SELECT o.id, o.status, o.available_at, o.hold FROM "{{.Outbox}}" o
             WHERE o.aggregate_type = a.aggregate_type AND o.aggregate_id = a.aggregate_id AND o.hold > 0
               AND o.status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED') AND (o.status <> 'FAILED' OR $5::bool)
             ORDER BY o.aggregate_type, o.aggregate_id, o.id LIMIT n.n)
            UNION ALL
            (SELECT o.id, o.status, o.available_at, o.hold FROM "{{.Outbox}}" o
             WHERE o.aggregate_type = a.aggregate_type AND o.aggregate_id = a.aggregate_id AND o.id >= a.cur
               AND o.hold = 0 AND o.status IN ('PENDING', 'PROCESSING')
             ORDER BY o.aggregate_type, o.aggregate_id, o.id LIMIT n.n)
        ) x ORDER BY id LIMIT n.n
    ) e
)
SELECT 1, lane, id, aggregate_type, aggregate_id, status, available_at, 0 FROM w
UNION ALL SELECT 3, lane, id, aggregate_type, aggregate_id, status, available_at, hold FROM r
UNION ALL SELECT 4, 0, 0, '', '', '', now(), 0{{end}}

-- claim.missing_ids returns the ids of $1 that have no row (yet) in the table.
{{define "claim.missing_ids"}}SELECT i FROM unnest($1::bigint[]) i WHERE NOT EXISTS (SELECT 1 FROM "{{.Outbox}}" o WHERE o.id = i){{end}}

-- claim.xact_id takes a transaction id for the claim's read (after the
-- sequence's last value: see lanes.Horizon).
{{define "claim.xact_id"}}SELECT pg_current_xact_id()::text::bigint{{end}}
