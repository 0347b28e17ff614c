-- The completion's statements (complete.go, complete_delivered.go), under
-- their names of before the backend's sql/<step>.sql files: they move to
-- sql/complete.sql as complete.<name> with the completion's plan, and this
-- file goes away then. queries.go parses it with sql/*.sql into one set.

-- claim_row locks a claim's row for its completion; claim_ids and
-- claim_delete update or delete it.
{{define "claim_row"}}SELECT lanes, lane_tokens, ids FROM `{{.Outbox}}_claims` WHERE token = ? FOR UPDATE{{end}}

{{define "claim_ids"}}UPDATE `{{.Outbox}}_claims` SET ids = ? WHERE token = ?{{end}}

{{define "claim_delete"}}DELETE FROM `{{.Outbox}}_claims` WHERE token = ?{{end}}

-- complete_lock locks the rows IDs of a completion that are still PENDING
-- in the lanes Marks (integers) its claim still holds, in id order. It
-- waits (no SKIP LOCKED): a row another transaction holds is decided when
-- that one ends.
{{define "complete_lock"}}
SELECT id, aggregate_type, aggregate_id FROM `{{.Outbox}}` FORCE INDEX (PRIMARY)
WHERE id IN ({{.IDs}}) AND status = 'PENDING' AND lane IN ({{.Marks}})
ORDER BY id
FOR UPDATE{{end}}

-- complete_delivered marks the rows IDs PROCESSED that are still PENDING in
-- the lanes Marks (integers) their claim still holds, with the
-- assignments Sets (", " and the delivery recorded on the rows, or
-- nothing); complete_update applies the fixed assignments Sets to the rows
-- IDs, which complete_lock locked.
{{define "complete_delivered"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET status = 'PROCESSED',
processed_at = UTC_TIMESTAMP(6){{.Sets}}
WHERE id IN ({{.IDs}}) AND status = 'PENDING' AND lane IN ({{.Marks}}){{end}}

{{define "complete_update"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET {{.Sets}}
WHERE id IN ({{.IDs}}) AND status = 'PENDING'{{end}}

-- delivered_replays reads which of the rows IDs are PROCESSED with their
-- delivery recorded under token ?: a replayed DELIVERED outcome of those
-- writes nothing.
{{define "delivered_replays"}}SELECT id FROM `{{.Outbox}}` FORCE INDEX (PRIMARY)
WHERE id IN ({{.IDs}}) AND status = 'PROCESSED' AND delivered_token = ?{{end}}

-- dead_letter_insert copies the rows IDs to the dead letters, with the
-- reason of each from Cases and the time ?.
{{define "dead_letter_insert"}}INSERT INTO `{{.DeadLetters}}` (outbox_id, event_id, aggregate_type, aggregate_id,
event_type, payload, headers, retry_count, reason, failed_at)
SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, CASE id{{.Cases}} END, CAST(? AS DATETIME(6))
FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE id IN ({{.IDs}}) ORDER BY id{{end}}

-- behind_retried reads the PENDING rows behind retried heads: Cond is one
-- (aggregate_type = ? AND aggregate_id = ? AND unfinished = 1 AND id > ?)
-- per aggregate, OR-ed; the rows IDs were changed already, and the rows a
-- claim holds are left to it.
{{define "behind_retried"}}SELECT id, aggregate_type, aggregate_id, available_at FROM `{{.Outbox}}`
FORCE INDEX (`{{.Outbox}}_aggregate_idx`) WHERE ({{.Cond}}) AND status = 'PENDING' AND id NOT IN ({{.IDs}})
  AND id NOT IN ({{template "queries.busy" .}}){{end}}

-- The attempt rows Values, with the trace id or without it.
{{define "insert_traced_attempts"}}INSERT IGNORE INTO `{{.Attempts}}` (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, `error`, trace_id) VALUES {{.Values}}{{end}}
