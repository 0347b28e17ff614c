-- snapshot.figures reads the cheap figures in one statement: each count is a
-- range of the (status, available_at, id) index, so the PROCESSED rows are
-- never read, and the ages use one reading of the clock. A PENDING row that
-- a claim holds (queries.busy, migration 00007) counts as PROCESSING, and the due
-- age is that of the oldest due row no claim holds.
{{define "snapshot.figures"}}
SELECT UTC_TIMESTAMP(6),
    (SELECT COUNT(*) FROM `{{.Outbox}}` WHERE status = 'PENDING') - ({{template "admin.busy_pending" .}}),
    (SELECT COUNT(*) FROM `{{.Outbox}}` WHERE status = 'PROCESSING') + ({{template "admin.busy_pending" .}}),
    (SELECT COUNT(*) FROM `{{.Outbox}}` WHERE status = 'BLOCKED'),
    (SELECT COUNT(*) FROM `{{.Outbox}}` WHERE status = 'FAILED'),
    (SELECT TIMESTAMPDIFF(MICROSECOND, d.available_at, UTC_TIMESTAMP(6)) FROM (
        SELECT available_at FROM `{{.Outbox}}` FORCE INDEX (`{{.Outbox}}_due_idx`)
        WHERE status = 'PENDING' AND available_at <= UTC_TIMESTAMP(6) AND id NOT IN ({{template "queries.busy" .}})
        ORDER BY available_at, id LIMIT 1) d),
    (SELECT COUNT(*) FROM `{{.DeadLetters}}` WHERE requeued_at IS NULL){{end}}

-- snapshot.final_counts counts the events of the final statuses.
{{define "snapshot.final_counts"}}SELECT status, COUNT(*) FROM `{{.Outbox}}` WHERE status IN ('PROCESSED', 'EXPIRED', 'SKIPPED') GROUP BY status{{end}}

-- snapshot.oldest_pending visits every PENDING row for its created_at; ? is the
-- snapshot's clock.
{{define "snapshot.oldest_pending"}}SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), ?) FROM `{{.Outbox}}` WHERE status = 'PENDING'{{end}}

-- snapshot.gauge_lock takes the gauge lease, the named lock of
-- snapshot.gauge_lock_name ("outbox-gauges:" + SHA1("<database>.<table>"),
-- ? is the table: lock names are server-wide and at most 64 characters),
-- and snapshot.gauge_unlock gives it back.
{{define "snapshot.gauge_lock_name"}}CONCAT('outbox-gauges:', SHA1(CONCAT(DATABASE(), '.', ?))){{end}}

{{define "snapshot.gauge_lock"}}SELECT GET_LOCK({{template "snapshot.gauge_lock_name" .}}, 0){{end}}

{{define "snapshot.gauge_unlock"}}DO RELEASE_LOCK({{template "snapshot.gauge_lock_name" .}}){{end}}
