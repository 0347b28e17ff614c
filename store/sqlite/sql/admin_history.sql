-- The history (migration 10, docs/HISTORY.md): finished events move from
-- the hot table into <outbox>_history and their attempts into
-- <outbox>_attempts_history, each row with its month (YYYYMM of the
-- event's finish time); retention deletes whole months.

-- admin_history.event_columns and admin_history.attempt_columns are the
-- column lists of the two history tables, in the order every INSERT into
-- them names them: history rows are only ever inserted.
{{define "admin_history.event_columns"}}id, event_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload, headers, status,
    retry_count, created_at, available_at, expires_at, finished_at, last_error, delivered_relay_id, delivered_attempt,
    delivered_token, delivered_started_at, delivered_finished_at, delivered_trace_id, delivered_receipt, month{{end}}

{{define "admin_history.attempt_columns"}}event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at,
    error, trace_id, receipt, event_finished_at, month{{end}}

-- admin_history.page reads the page after id ?1 (?2 rows) and tells which
-- rows move (finished: PROCESSED, EXPIRED, SKIPPED, at or before the
-- cutoff ?3) and which are old.
{{define "admin_history.page"}}
SELECT id,
    (status IN ('PROCESSED', 'EXPIRED', 'SKIPPED') AND processed_at IS NOT NULL AND processed_at <= ?3) AS move,
    created_at <= ?3 AS old
FROM "{{.Outbox}}" WHERE id > ?1 ORDER BY id LIMIT ?2{{end}}

-- admin_history.insert_events copies the rows ?1 (a JSON array of ids)
-- into the history, with the delivery recorded on each row and its receipt.
{{define "admin_history.insert_events"}}
INSERT INTO "{{.Outbox}}_history" ({{template "admin_history.event_columns" .}})
SELECT id, event_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload, headers, status, retry_count,
    created_at, available_at, expires_at, processed_at, last_error, delivered_relay_id, delivered_attempt, delivered_token,
    delivered_started_at, delivered_finished_at, delivered_trace_id, delivered_receipt, substr(processed_at, 1, 4) || substr(processed_at, 6, 2)
FROM "{{.Outbox}}" WHERE id IN (SELECT value FROM json_each(?1)){{end}}

-- admin_history.insert_attempts copies the attempts of the rows ?1 into
-- the attempts' history, each with its receipt and its event's finish
-- time and month.
{{define "admin_history.insert_attempts"}}
INSERT INTO "{{.Outbox}}_attempts_history" ({{template "admin_history.attempt_columns" .}})
SELECT a.event_id, a.claim_token, a.outcome, a.outbox_id, a.attempt, a.relay_id, a.started_at, a.finished_at, a.error,
    a.trace_id, a.receipt, o.processed_at, substr(o.processed_at, 1, 4) || substr(o.processed_at, 6, 2)
FROM "{{.Attempts}}" a JOIN "{{.Outbox}}" o ON o.event_id = a.event_id
WHERE o.id IN (SELECT value FROM json_each(?1)){{end}}

-- admin_history.delete_attempts and admin_history.delete_events remove
-- the moved rows ?1 from the hot tables.
{{define "admin_history.delete_attempts"}}DELETE FROM "{{.Attempts}}" WHERE event_id IN (
    SELECT event_id FROM "{{.Outbox}}" WHERE id IN (SELECT value FROM json_each(?1))){{end}}

{{define "admin_history.delete_events"}}DELETE FROM "{{.Outbox}}" WHERE id IN (SELECT value FROM json_each(?1)){{end}}

-- admin_history.months counts the rows of each month of the history.
{{define "admin_history.months"}}
SELECT month, sum(events), sum(attempts) FROM (
    SELECT month, count(*) AS events, 0 AS attempts FROM "{{.Outbox}}_history" GROUP BY month
    UNION ALL
    SELECT month, 0, count(*) FROM "{{.Outbox}}_attempts_history" GROUP BY month
) GROUP BY month ORDER BY month{{end}}

-- admin_history.drop_events and admin_history.drop_attempts delete one
-- whole month (?1, YYYYMM) by its index.
{{define "admin_history.drop_events"}}DELETE FROM "{{.Outbox}}_history" WHERE month = ?1{{end}}

{{define "admin_history.drop_attempts"}}DELETE FROM "{{.Outbox}}_attempts_history" WHERE month = ?1{{end}}

-- admin_history.record_drop records one month's drop.
{{define "admin_history.record_drop"}}INSERT INTO "{{.Outbox}}_history_drops" (month, events, attempts, cutoff) VALUES (?1, ?2, ?3, ?4){{end}}

-- admin_history.get_event reads an event from the history, as a record.
{{define "admin_history.get_event"}}SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, status,
    retry_count, created_at, finished_at, available_at, expires_at, NULL, NULL, last_error
FROM "{{.Outbox}}_history" WHERE event_id = ? ORDER BY finished_at DESC LIMIT 1{{end}}

-- admin_history.attempts reads the audit trail of an event from the
-- history: its attempts' rows and the delivery kept on its event row,
-- each with its receipt (as admin.attempts reads them).
{{define "admin_history.attempts"}}SELECT attempt, relay_id, claim_token, started_at, finished_at, outcome, COALESCE(error, ''), COALESCE(trace_id, ''),
            receipt
        FROM "{{.Outbox}}_attempts_history" WHERE event_id = ?1
        UNION ALL
        SELECT delivered_attempt, delivered_relay_id, COALESCE(delivered_token, ''), delivered_started_at, delivered_finished_at,
            'DELIVERED', '', COALESCE(delivered_trace_id, ''), delivered_receipt
        FROM "{{.Outbox}}_history" WHERE event_id = ?1 AND delivered_relay_id IS NOT NULL
        ORDER BY 1, 5, 4{{end}}
