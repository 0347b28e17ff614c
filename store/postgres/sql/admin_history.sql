-- The history (migration 14, docs/HISTORY.md): finished events move from
-- the hot table into <outbox>_history and their attempts into
-- <outbox>_attempts_history, partitioned by month of the event's finish
-- time; retention drops whole partitions.

-- admin_history.event_columns and admin_history.attempt_columns are the
-- column lists of the two history tables, in the order every INSERT into
-- them names them: history rows are only ever inserted.
{{define "admin_history.event_columns"}}id, event_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload, headers, status,
    retry_count, created_at, available_at, expires_at, finished_at, last_error, delivered_relay_id, delivered_attempt,
    delivered_token, delivered_started_at, delivered_finished_at, delivered_trace_id, delivered_receipt{{end}}

{{define "admin_history.attempt_columns"}}event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at,
    error, trace_id, receipt, event_finished_at{{end}}

-- admin_history.movable says which rows of a page ($2 rows after id $1)
-- move: the finished rows (PROCESSED, EXPIRED, SKIPPED) that finished
-- before $3 microseconds ago and, when $4 is not NULL, after $4 (the
-- adoption of the table: rows that finished earlier are the team's
-- history, kept in the hot table unless asked). It is the WHERE of the
-- locking read, so that a row that changed since (a requeue) is checked
-- again once locked.
{{define "admin_history.movable"}}o.status IN ('PROCESSED', 'EXPIRED', 'SKIPPED')
      AND o.processed_at < now() - $3::bigint * interval '1 microsecond'
      AND ($4::timestamptz IS NULL OR o.processed_at > $4::timestamptz){{end}}

-- admin_history.months returns the months (UTC, first day) of the rows
-- admin_history.move would move with the same parameters: the partitions
-- it needs.
{{define "admin_history.months"}}
WITH p AS (SELECT id FROM "{{.Outbox}}" WHERE id > $1 ORDER BY id LIMIT $2)
SELECT DISTINCT to_char(date_trunc('month', o.processed_at AT TIME ZONE 'UTC'), 'YYYYMM')
FROM "{{.Outbox}}" o JOIN p ON p.id = o.id WHERE {{template "admin_history.movable" .}}{{end}}

-- admin_history.move moves one page (admin_history.movable), skipping rows
-- another transaction holds: each event row is deleted from the hot table
-- and inserted into the history with its delivery's audit (the
-- delivered_* columns of the row, or its batch's row in the deliveries
-- table: the one of its lane whose completed_at is its processed_at) and
-- its receipt (delivered_receipt, kept on the row in either case), and its
-- attempts rows move into the attempts' history with their receipts. It
-- returns how many events moved, the page's last id, how many of the
-- page's rows are older than the cutoff, and the earliest finish time of
-- a PROCESSED row past the cutoff that stayed (a row another transaction
-- held): the deliveries table keeps its rows from then on.
{{define "admin_history.move"}}
WITH p AS (SELECT id, created_at FROM "{{.Outbox}}" WHERE id > $1 ORDER BY id LIMIT $2),
d AS (
    SELECT o.id FROM "{{.Outbox}}" o JOIN p ON p.id = o.id WHERE {{template "admin_history.movable" .}}
    FOR UPDATE OF o SKIP LOCKED
),
del AS (
    DELETE FROM "{{.Outbox}}" o USING d WHERE o.id = d.id
    RETURNING o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.aggregate_seq, o.event_type, o.payload, o.headers,
        o.status, o.retry_count, o.created_at, o.available_at, o.expires_at, o.processed_at, o.last_error, o.lane,
        o.delivered_relay_id, o.delivered_attempt, o.delivered_token, o.delivered_started_at, o.delivered_finished_at,
        o.delivered_trace_id, o.delivered_receipt
),
h AS (
    INSERT INTO "{{.Outbox}}_history" ({{template "admin_history.event_columns" .}})
    SELECT del.id, del.event_id, del.aggregate_type, del.aggregate_id, del.aggregate_seq, del.event_type,
        del.payload::text::json, COALESCE(del.headers::text::json, '{}'), del.status, COALESCE(del.retry_count, 0),
        COALESCE(del.created_at, del.processed_at), COALESCE(del.available_at, del.created_at, del.processed_at),
        del.expires_at, del.processed_at, del.last_error::text,
        COALESCE(del.delivered_relay_id, dv.relay_id), COALESCE(del.delivered_attempt, CASE WHEN dv.relay_id IS NOT NULL THEN del.retry_count + 1 END),
        COALESCE(del.delivered_token, dv.token), COALESCE(del.delivered_started_at, dv.started_at),
        COALESCE(del.delivered_finished_at, dv.finished_at), COALESCE(del.delivered_trace_id, dv.trace_id),
        del.delivered_receipt
    FROM del LEFT JOIN LATERAL (
        SELECT x.relay_id, x.token, x.started_at, x.finished_at, NULLIF(x.trace_ids[array_position(x.ids, del.id)], '') AS trace_id
        FROM "{{.Outbox}}_deliveries" x
        WHERE del.status = 'PROCESSED' AND del.delivered_relay_id IS NULL
          AND x.completed_at = del.processed_at AND del.lane = ANY(x.lanes) AND (x.ids IS NULL OR del.id = ANY(x.ids))
        LIMIT 1) dv ON true
),
ma AS (
    DELETE FROM "{{.Attempts}}" a USING del WHERE a.event_id = del.event_id
    RETURNING a.event_id, a.claim_token, a.outcome, a.outbox_id, a.attempt, a.relay_id, a.started_at, a.finished_at,
        a.error, a.trace_id, a.receipt, del.processed_at
),
ha AS (INSERT INTO "{{.Outbox}}_attempts_history" ({{template "admin_history.attempt_columns" .}}) SELECT * FROM ma)
SELECT (SELECT count(*) FROM del), COALESCE((SELECT max(id) FROM p), 0),
    (SELECT count(*) FROM p WHERE created_at < now() - $3::bigint * interval '1 microsecond'),
    (SELECT min(o.processed_at) FROM "{{.Outbox}}" o JOIN p ON p.id = o.id
     WHERE {{template "admin_history.movable" .}} AND o.status = 'PROCESSED' AND NOT EXISTS (SELECT 1 FROM d WHERE d.id = o.id)){{end}}

-- admin_history.purge_deliveries deletes a page ($2) of the deliveries
-- table's rows completed before $1 (their events moved into history, which
-- keeps their audit).
{{define "admin_history.purge_deliveries"}}DELETE FROM "{{.Outbox}}_deliveries" WHERE id IN (
    SELECT id FROM "{{.Outbox}}_deliveries" WHERE completed_at < $1::timestamptz ORDER BY id LIMIT $2){{end}}

-- admin_history.create_events and admin_history.create_attempts create the
-- partitions of one month ({{.Month}}: YYYYMM, from {{.From}} to {{.To}}),
-- if they do not exist.
{{define "admin_history.create_events"}}CREATE TABLE IF NOT EXISTS "{{.Outbox}}_history_{{.Month}}"
    PARTITION OF "{{.Outbox}}_history" FOR VALUES FROM ('{{.From}}') TO ('{{.To}}'){{end}}

{{define "admin_history.create_attempts"}}CREATE TABLE IF NOT EXISTS "{{.Outbox}}_history_a_{{.Month}}"
    PARTITION OF "{{.Outbox}}_attempts_history" FOR VALUES FROM ('{{.From}}') TO ('{{.To}}'){{end}}

-- admin_history.partitions lists the partitions of the two history tables
-- ($1: the events' table, $2: the attempts'), with the planner's row
-- estimate (-1 when never analyzed), each as (kind, name, estimate):
-- kind 'e' for the events', 'a' for the attempts'.
{{define "admin_history.partitions"}}
SELECT CASE WHEN i.inhparent = to_regclass($1) THEN 'e' ELSE 'a' END, c.relname::text, c.reltuples::bigint
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent IN (to_regclass($1), to_regclass($2))
ORDER BY 2{{end}}

-- admin_history.count_events and admin_history.count_attempts count one
-- partition's rows before it is dropped (for the drop's record).
{{define "admin_history.count_events"}}SELECT count(*) FROM "{{.Outbox}}_history_{{.Month}}"{{end}}

{{define "admin_history.count_attempts"}}SELECT count(*) FROM "{{.Outbox}}_history_a_{{.Month}}"{{end}}

-- admin_history.drop_events and admin_history.drop_attempts drop one
-- month's partitions whole.
{{define "admin_history.drop_events"}}DROP TABLE IF EXISTS "{{.Outbox}}_history_{{.Month}}"{{end}}

{{define "admin_history.drop_attempts"}}DROP TABLE IF EXISTS "{{.Outbox}}_history_a_{{.Month}}"{{end}}

-- admin_history.record_drop records one month's drop.
{{define "admin_history.record_drop"}}INSERT INTO "{{.Outbox}}_history_drops" (month, events, attempts, cutoff)
VALUES ($1::date, $2, $3, $4::timestamptz){{end}}

-- admin_history.get_event reads an event from the history, as a record.
{{define "admin_history.get_event"}}SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, status,
    retry_count, created_at, finished_at, available_at, expires_at, NULL::timestamptz, NULL::uuid, last_error
FROM "{{.Outbox}}_history" WHERE event_id = $1::uuid ORDER BY finished_at DESC LIMIT 1{{end}}

-- admin_history.attempts reads the audit trail of an event from the
-- history: its attempts' rows and the delivery kept on its event row,
-- each with its receipt (as admin.attempts reads them).
{{define "admin_history.attempts"}}
SELECT attempt, relay_id, claim_token, started_at, finished_at, outcome, COALESCE(error, ''), COALESCE(trace_id, ''), receipt
FROM "{{.Outbox}}_attempts_history" WHERE event_id = $1::uuid
UNION ALL
SELECT delivered_attempt, delivered_relay_id, COALESCE(delivered_token, '00000000-0000-0000-0000-000000000000'::uuid),
    delivered_started_at, delivered_finished_at, 'DELIVERED', '', COALESCE(delivered_trace_id, ''), delivered_receipt
FROM "{{.Outbox}}_history" WHERE event_id = $1::uuid AND delivered_relay_id IS NOT NULL
ORDER BY 1, 5, 4{{end}}

-- admin_history.now reads the database clock.
{{define "admin_history.now"}}SELECT now(){{end}}

-- admin_history.lock_timeout bounds the wait of a retention's DROP TABLE
-- for the history's lock: while it waits, every read and move of the
-- history queues behind it.
{{define "admin_history.lock_timeout"}}SET LOCAL lock_timeout = '5s'{{end}}
