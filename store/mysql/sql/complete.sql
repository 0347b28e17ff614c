-- The completion of a claim (complete.go), in a READ COMMITTED
-- transaction. The plan (store/internal/completion) decides what each row
-- becomes; these statements write it. IDs are id lists and Marks lane
-- lists (integers formatted in Go), Sets fixed assignments, Cases the WHEN
-- arms of a CASE on id, Cond an OR of fixed conditions and Values the rows
-- of a multi-row insert, all placeholders for the values (see fragments in
-- queries.go).

-- complete.claim_row locks a claim's row for its completion;
-- complete.claim_ids and complete.claim_delete update or delete it.
{{define "complete.claim_row"}}SELECT lanes, lane_tokens, ids FROM `{{.Outbox}}_claims` WHERE token = ? FOR UPDATE{{end}}

{{define "complete.claim_ids"}}UPDATE `{{.Outbox}}_claims` SET ids = ? WHERE token = ?{{end}}

{{define "complete.claim_delete"}}DELETE FROM `{{.Outbox}}_claims` WHERE token = ?{{end}}

-- complete.lock locks the rows IDs of a completion that are still PENDING
-- in the lanes Marks (integers) its claim still holds, in id order. It
-- waits (no SKIP LOCKED): a row another transaction holds is decided when
-- that one ends.
{{define "complete.lock"}}
SELECT id, aggregate_type, aggregate_id FROM `{{.Outbox}}` FORCE INDEX (PRIMARY)
WHERE id IN ({{.IDs}}) AND status = 'PENDING' AND lane IN ({{.Marks}})
ORDER BY id
FOR UPDATE{{end}}

-- complete.delivered marks the rows IDs PROCESSED that are still PENDING
-- in the lanes Marks (integers) their claim still holds, with the
-- assignments Sets (", " and the delivery recorded on the rows, or
-- nothing); complete.update applies the fixed assignments Sets to the rows
-- IDs, which complete.lock locked.
{{define "complete.delivered"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET status = 'PROCESSED',
processed_at = UTC_TIMESTAMP(6){{.Sets}}
WHERE id IN ({{.IDs}}) AND status = 'PENDING' AND lane IN ({{.Marks}}){{end}}

{{define "complete.update"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET {{.Sets}}
WHERE id IN ({{.IDs}}) AND status = 'PENDING'{{end}}

-- complete.delivered_replays reads which of the rows IDs are PROCESSED
-- with their delivery recorded under token ?: a replayed DELIVERED outcome
-- of those writes nothing.
{{define "complete.delivered_replays"}}SELECT id FROM `{{.Outbox}}` FORCE INDEX (PRIMARY)
WHERE id IN ({{.IDs}}) AND status = 'PROCESSED' AND delivered_token = ?{{end}}

-- complete.dead_letter copies the rows IDs to the dead letters, with the
-- reason of each from Cases and the time ?.
{{define "complete.dead_letter"}}INSERT INTO `{{.DeadLetters}}` (outbox_id, event_id, aggregate_type, aggregate_id,
event_type, payload, headers, retry_count, reason, failed_at)
SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, CASE id{{.Cases}} END, CAST(? AS DATETIME(6))
FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE id IN ({{.IDs}}) ORDER BY id{{end}}

-- complete.behind reads the PENDING rows behind the failed and retried
-- heads: Cond is one (aggregate_type = ? AND aggregate_id = ? AND
-- unfinished = 1 AND id > ?) per head, OR-ed; the rows IDs were changed
-- already, and the rows a claim holds are left to it. It takes no locks:
-- a producer's uncommitted rows are never waited for.
{{define "complete.behind"}}SELECT id, aggregate_type, aggregate_id, available_at FROM `{{.Outbox}}`
FORCE INDEX (`{{.Outbox}}_aggregate_idx`) WHERE ({{.Cond}}) AND status = 'PENDING' AND id NOT IN ({{.IDs}})
  AND id NOT IN ({{template "queries.busy" .}}){{end}}

-- complete.insert_attempts writes the attempt rows Values; a row whose key
-- (event, token, outcome) exists, a replay, is ignored.
{{define "complete.insert_attempts"}}INSERT IGNORE INTO `{{.Attempts}}` (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, `error`, trace_id, receipt) VALUES {{.Values}}{{end}}
