-- snapshot.figures reads the cheap figures in one statement (?1 is now):
-- each count names one unfinished status and reads its partial index; a
-- PENDING row that a claim holds counts as PROCESSING.
{{define "snapshot.figures"}}
SELECT (SELECT count(*) FROM "{{.Outbox}}" WHERE status = 'PENDING' AND id NOT IN ({{template "queries.busy" .}})),
       (SELECT count(*) FROM "{{.Outbox}}" WHERE status = 'PROCESSING')
         + (SELECT count(*) FROM "{{.Outbox}}" WHERE status = 'PENDING' AND id IN ({{template "queries.busy" .}})),
       (SELECT count(*) FROM "{{.Outbox}}" WHERE status = 'BLOCKED'),
       (SELECT count(*) FROM "{{.Outbox}}" WHERE status = 'FAILED'),
       (SELECT min(available_at) FROM "{{.Outbox}}" WHERE status = 'PENDING' AND available_at <= ?1 AND id NOT IN ({{template "queries.busy" .}})),
       (SELECT count(*) FROM "{{.DeadLetters}}" WHERE requeued_at IS NULL){{end}}

-- snapshot.final_counts counts the finished events by status.
{{define "snapshot.final_counts"}}SELECT status, count(*) FROM "{{.Outbox}}" WHERE status IN ('PROCESSED', 'EXPIRED', 'SKIPPED') GROUP BY status{{end}}

-- snapshot.oldest_pending reads the creation time of the oldest PENDING event.
{{define "snapshot.oldest_pending"}}SELECT min(created_at) FROM "{{.Outbox}}" WHERE status = 'PENDING'{{end}}
