-- The fan-out (fanout.go): copies of another outbox table's rows, and the
-- event types of the unfinished events. From is the source table, in
-- the same schema as Outbox, rendered per call (store.ValidateTable
-- checked its name).

-- fanout.lock_aggregates takes enqueue.lock_aggregates' advisory locks for
-- the aggregates of the rows of From with ids $2 that this table
-- lacks, in the order of Enqueue's (byte order of type, 0x1f, id; $1 is
-- this outbox table's name), before fanout.copy writes a row. The copy's
-- statement then reads, after the locks, whether an earlier copy wrote a
-- row meanwhile.
{{define "fanout.lock_aggregates"}}SELECT pg_advisory_xact_lock(hashtext($1), hashtext(x.k)) FROM (
    SELECT DISTINCT s.aggregate_type || chr(31) || s.aggregate_id AS k FROM "{{.From}}" s
    WHERE s.id = ANY($2::bigint[])
      AND NOT EXISTS (SELECT 1 FROM "{{.Outbox}}" d WHERE d.event_id = s.event_id::uuid)
) x ORDER BY x.k COLLATE "C"{{end}}

-- fanout.copy writes the rows of From with ids $1 that this table
-- lacks (by event_id) as new PENDING events due now, in id order: the
-- insert trigger (migration 10) locks each row's aggregate, numbers it
-- (aggregate_seq), gives it its lane and hold, and draws its id, in that
-- order. ON CONFLICT covers a copy that committed the same event between
-- the NOT EXISTS and the insert (with Config.NoAggregateLock). The casts
-- are enqueue.head's: a table adopted with other column types (jsonb,
-- text) is copied from and into as Enqueue writes it; a json column's text
-- is kept byte for byte.
{{define "fanout.copy"}}INSERT INTO "{{.Outbox}}" (event_id, aggregate_type, aggregate_id, event_type, payload, headers, on_expired,
    created_at, expires_at, available_at)
SELECT s.event_id::uuid, s.aggregate_type::text, s.aggregate_id::text, s.event_type::text, s.payload::text::json,
    s.headers::text::json, s.on_expired::text::json, s.created_at::timestamptz, s.expires_at::timestamptz, now()
FROM "{{.From}}" s
WHERE s.id = ANY($1::bigint[])
  AND NOT EXISTS (SELECT 1 FROM "{{.Outbox}}" d WHERE d.event_id = s.event_id::uuid)
ORDER BY s.id
ON CONFLICT (event_id) DO NOTHING{{end}}

-- fanout.event_types counts the unfinished events per (event type,
-- aggregate type), in byte order. A claimed event is PENDING in its row.
{{define "fanout.event_types"}}SELECT event_type, aggregate_type, count(*) FROM "{{.Outbox}}"
WHERE status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED')
GROUP BY event_type, aggregate_type
ORDER BY event_type COLLATE "C", aggregate_type COLLATE "C"{{end}}
