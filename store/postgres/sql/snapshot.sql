-- snapshot.figures reads the cheap figures in one statement, never the
-- delivered rows: the unfinished rows of hold 0 from each lane's stored
-- cursor on (the lane index) and those of hold 1 (the due index) are the
-- PENDING ones, PROCESSING when a claim holds them (busy); BLOCKED and
-- FAILED rows have hold 2 (the held index).
{{define "snapshot.figures"}}
WITH busy AS MATERIALIZED (
    SELECT DISTINCT unnest(ids) AS id FROM "{{.Outbox}}_claims"
),
u AS MATERIALIZED (
    SELECT x.id, x.status, x.available_at FROM "{{.Outbox}}_lanes" l CROSS JOIN LATERAL (
        SELECT o.id, o.status, o.available_at FROM "{{.Outbox}}" o
        WHERE o.lane = l.lane AND o.id >= l.next_id AND o.hold = 0 AND o.status IN ('PENDING', 'PROCESSING')) x
    UNION ALL
    SELECT id, status, available_at FROM "{{.Outbox}}" WHERE hold = 1 AND status IN ('PENDING', 'PROCESSING')
)
SELECT now(),
    (SELECT count(*) FROM u WHERE status = 'PENDING' AND id NOT IN (SELECT id FROM busy)),
    (SELECT count(*) FROM u WHERE status = 'PROCESSING' OR id IN (SELECT id FROM busy)),
    (SELECT count(*) FROM "{{.Outbox}}" WHERE hold = 2 AND status = 'BLOCKED'),
    (SELECT count(*) FROM "{{.Outbox}}" WHERE hold = 2 AND status = 'FAILED'),
    COALESCE((SELECT EXTRACT(EPOCH FROM now() - min(available_at)) FROM u
              WHERE status = 'PENDING' AND available_at <= now() AND id NOT IN (SELECT id FROM busy)), 0)::float8,
    (SELECT count(*) FROM "{{.DeadLetters}}" WHERE requeued_at IS NULL){{end}}

-- snapshot.final_counts counts the final statuses: a scan of the whole table.
{{define "snapshot.final_counts"}}SELECT status, count(*) FROM "{{.Outbox}}" WHERE status IN ('PROCESSED', 'EXPIRED', 'SKIPPED') GROUP BY status{{end}}

-- snapshot.oldest_pending visits every PENDING row for its created_at.
{{define "snapshot.oldest_pending"}}SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 FROM "{{.Outbox}}" WHERE status = 'PENDING'{{end}}

-- snapshot.gauge_lock and snapshot.gauge_unlock take and release the gauge
-- lease, the session advisory lock $1 (of the outbox table).
{{define "snapshot.gauge_lock"}}SELECT pg_try_advisory_lock($1){{end}}

{{define "snapshot.gauge_unlock"}}SELECT pg_advisory_unlock($1){{end}}
