-- The fan-out (fanout.go): copies of another outbox table's rows, and the
-- event types of the unfinished events. From is the source table, in the
-- same database file as Outbox, rendered per call (store.ValidateTable
-- checked its name).

-- fanout.copy writes the rows of From whose ids are in the JSON array ?1
-- and that this table lacks (by event_id) as new PENDING events due now,
-- in id order. It runs in a write transaction, which excludes every other
-- writer, as an Enqueue's does: ids follow commit order. The insert
-- trigger (migration 7) numbers each row and gives it its aggregate's
-- lane. ON CONFLICT skips an event this table holds already and nothing
-- else; the NOT EXISTS keeps the statement from counting on it.
{{define "fanout.copy"}}INSERT INTO "{{.Outbox}}" (event_id, aggregate_type, aggregate_id, event_type, payload, headers, on_expired,
    created_at, expires_at, available_at)
SELECT s.event_id, s.aggregate_type, s.aggregate_id, s.event_type, s.payload, s.headers, s.on_expired,
    s.created_at, s.expires_at, strftime({{.TS}}, 'now')
FROM "{{.From}}" s
WHERE s.id IN (SELECT value FROM json_each(?1))
  AND NOT EXISTS (SELECT 1 FROM "{{.Outbox}}" d WHERE d.event_id = s.event_id)
ORDER BY s.id
ON CONFLICT (event_id) DO NOTHING{{end}}

-- fanout.event_types counts the unfinished events per (event type,
-- aggregate type), in byte order (SQLite's BINARY collation). A claimed
-- event is PENDING in its row.
{{define "fanout.event_types"}}SELECT event_type, aggregate_type, count(*) FROM "{{.Outbox}}"
WHERE {{template "queries.unfinished" .}}
GROUP BY event_type, aggregate_type
ORDER BY event_type, aggregate_type{{end}}
