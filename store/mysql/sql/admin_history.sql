-- The history (migration 11, docs/HISTORY.md): finished events move from
-- the hot table into <outbox>_history and their attempts into
-- <outbox>_attempts_history, partitioned by RANGE on month (YYYYMM of the
-- event's finish time); retention drops whole partitions.

-- admin_history.event_columns and admin_history.attempt_columns are the
-- column lists of the two history tables, in the order every INSERT into
-- them names them: history rows are only ever inserted.
{{define "admin_history.event_columns"}}month, id, event_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload, headers,
    status, retry_count, created_at, available_at, expires_at, finished_at, last_error, delivered_relay_id, delivered_attempt,
    delivered_token, delivered_started_at, delivered_finished_at, delivered_trace_id, delivered_receipt{{end}}

{{define "admin_history.attempt_columns"}}month, event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at,
    finished_at, `error`, trace_id, receipt, event_finished_at{{end}}

-- admin_history.page reads the page after id ? (? rows) without locks and
-- tells which rows move (finished: PROCESSED, EXPIRED, SKIPPED, before the
-- cutoff, now - ? microseconds; Cond: the adoption's condition), the
-- month they would move into, which rows are old, and the cutoff.
{{define "admin_history.page"}}SELECT id,
    (status IN ('PROCESSED', 'EXPIRED', 'SKIPPED') AND processed_at IS NOT NULL AND processed_at <= c.cutoff{{.Cond}}),
    COALESCE(EXTRACT(YEAR_MONTH FROM processed_at), 0), created_at <= c.cutoff, c.cutoff
FROM `{{.Outbox}}` JOIN (SELECT UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AS cutoff) c
WHERE id > ? ORDER BY id LIMIT ?{{end}}

-- admin_history.lock locks the rows IDs that still move at the cutoff ?,
-- skipping those another transaction holds.
{{define "admin_history.lock"}}SELECT id FROM `{{.Outbox}}` WHERE id IN ({{.IDs}})
AND status IN ('PROCESSED', 'EXPIRED', 'SKIPPED') AND processed_at <= CAST(? AS DATETIME(6)){{.Cond}}
ORDER BY id FOR UPDATE SKIP LOCKED{{end}}

-- admin_history.insert_events copies the locked rows IDs into the history,
-- with the delivery recorded on each row and its receipt.
{{define "admin_history.insert_events"}}INSERT INTO `{{.Outbox}}_history` ({{template "admin_history.event_columns" .}})
SELECT EXTRACT(YEAR_MONTH FROM processed_at), id, event_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload,
    headers, status, retry_count, created_at, available_at, expires_at, processed_at, last_error, delivered_relay_id,
    delivered_attempt, delivered_token, delivered_started_at, delivered_finished_at, delivered_trace_id, delivered_receipt
FROM `{{.Outbox}}` WHERE id IN ({{.IDs}}){{end}}

-- admin_history.insert_attempts copies the attempts of the rows IDs into
-- the attempts' history, each with its receipt and its event's finish
-- time and month.
{{define "admin_history.insert_attempts"}}INSERT INTO `{{.Outbox}}_attempts_history` ({{template "admin_history.attempt_columns" .}})
SELECT EXTRACT(YEAR_MONTH FROM o.processed_at), a.event_id, a.claim_token, a.outcome, a.outbox_id, a.attempt, a.relay_id,
    a.started_at, a.finished_at, a.`error`, a.trace_id, a.receipt, o.processed_at
FROM `{{.Attempts}}` a JOIN `{{.Outbox}}` o ON o.event_id = a.event_id WHERE o.id IN ({{.IDs}}){{end}}

-- admin_history.delete_attempts and admin_history.delete_events remove
-- the moved rows IDs from the hot tables.
{{define "admin_history.delete_attempts"}}DELETE a FROM `{{.Attempts}}` a JOIN `{{.Outbox}}` o ON o.event_id = a.event_id
WHERE o.id IN ({{.IDs}}){{end}}

{{define "admin_history.delete_events"}}DELETE FROM `{{.Outbox}}` WHERE id IN ({{.IDs}}){{end}}

-- admin_history.partitions lists the partitions of the history table ? with
-- their upper bound (MAXVALUE for pmax) and the estimate of their rows.
{{define "admin_history.partitions"}}SELECT PARTITION_NAME, PARTITION_DESCRIPTION, COALESCE(TABLE_ROWS, 0)
FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND PARTITION_NAME IS NOT NULL
ORDER BY PARTITION_ORDINAL_POSITION{{end}}

-- admin_history.partition is one month's partition in a reorganization:
-- Cond is its name (p<YYYYMM>), Values its bound (the next month).
{{define "admin_history.partition"}}PARTITION {{.Cond}} VALUES LESS THAN ({{.Values}}){{end}}

-- admin_history.reorganize_events and admin_history.reorganize_attempts
-- split partition In into the partitions Values (admin_history.partition,
-- and In again).
{{define "admin_history.reorganize_events"}}ALTER TABLE `{{.Outbox}}_history` REORGANIZE PARTITION {{.In}} INTO ({{.Values}}){{end}}

{{define "admin_history.reorganize_attempts"}}ALTER TABLE `{{.Outbox}}_attempts_history` REORGANIZE PARTITION {{.In}} INTO ({{.Values}}){{end}}

-- admin_history.count_events and admin_history.count_attempts count the
-- rows of partition In before it is dropped.
{{define "admin_history.count_events"}}SELECT count(*) FROM `{{.Outbox}}_history` PARTITION ({{.In}}){{end}}

{{define "admin_history.count_attempts"}}SELECT count(*) FROM `{{.Outbox}}_attempts_history` PARTITION ({{.In}}){{end}}

-- admin_history.drop_events and admin_history.drop_attempts drop the
-- partitions In whole.
{{define "admin_history.drop_events"}}ALTER TABLE `{{.Outbox}}_history` DROP PARTITION {{.In}}{{end}}

{{define "admin_history.drop_attempts"}}ALTER TABLE `{{.Outbox}}_attempts_history` DROP PARTITION {{.In}}{{end}}

-- admin_history.record_drop records one month's drop.
{{define "admin_history.record_drop"}}INSERT INTO `{{.Outbox}}_history_drops` (month, events, attempts, cutoff)
VALUES (?, ?, ?, CAST(? AS DATETIME(6))){{end}}

-- admin_history.get_event reads an event from the history, as a record.
{{define "admin_history.get_event"}}SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, status,
    retry_count, created_at, finished_at, available_at, expires_at, NULL, NULL, last_error
FROM `{{.Outbox}}_history` WHERE event_id = ? ORDER BY finished_at DESC LIMIT 1{{end}}

-- admin_history.attempts reads the audit trail of an event (? twice) from
-- the history: its attempts' rows and the delivery kept on its event row,
-- each with its receipt (as admin.attempts reads them).
{{define "admin_history.attempts"}}SELECT attempt, relay_id, claim_token, started_at, finished_at, outcome, COALESCE(`error`, ''), COALESCE(trace_id, ''),
    receipt
FROM `{{.Outbox}}_attempts_history` WHERE event_id = ?
UNION ALL
SELECT delivered_attempt, delivered_relay_id, COALESCE(delivered_token, ''), delivered_started_at, delivered_finished_at,
    'DELIVERED', '', COALESCE(delivered_trace_id, ''), delivered_receipt
FROM `{{.Outbox}}_history` WHERE event_id = ? AND delivered_relay_id IS NOT NULL
ORDER BY 1, 5, 4{{end}}
