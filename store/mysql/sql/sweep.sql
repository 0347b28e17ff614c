-- sweep.all_claims lists the claims, oldest first (the sweeper's candidates),
-- and sweep.all_lanes the live lanes' tokens.
{{define "sweep.all_claims"}}SELECT token, lanes, lane_tokens FROM `{{.Outbox}}_claims` ORDER BY created_ms, token{{end}}

{{define "sweep.all_lanes"}}SELECT lane, token FROM `{{.Outbox}}_lanes` WHERE token IS NOT NULL AND lease_until_ms > {{.NowMS}}{{end}}

-- sweep.dead_claims locks the claims Marks (placeholders) the sweeper found dead,
-- skipping those a completion holds, with their ids.
{{define "sweep.dead_claims"}}SELECT token, ids FROM `{{.Outbox}}_claims` WHERE token IN ({{.Marks}}) ORDER BY token FOR UPDATE SKIP LOCKED{{end}}

{{define "sweep.dead_claim_rows"}}SELECT id, event_id, retry_count, UTC_TIMESTAMP(6) FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE id IN ({{.IDs}}) ORDER BY id{{end}}

{{define "sweep.dead_claims_delete"}}DELETE FROM `{{.Outbox}}_claims` WHERE token IN ({{.Marks}}){{end}}

-- sweep.reap_select locks a page (?) of rows PROCESSING under a lease of the
-- schema before lanes (migration 00007) whose lease ended, skipping rows
-- another transaction holds, with the claim token they had. The
-- PROCESSING range of the due index holds only those rows.
{{define "sweep.reap_select"}}
SELECT id, event_id, lock_token, retry_count, locked_until, UTC_TIMESTAMP(6) FROM `{{.Outbox}}`
WHERE status = 'PROCESSING' AND locked_until < UTC_TIMESTAMP(6)
LIMIT ?
FOR UPDATE SKIP LOCKED{{end}}

-- sweep.expire_select locks a page (?) of waiting events past their deadline,
-- from the expiry index (waiting_expires_at is NULL for other rows), but
-- for those a claim holds.
{{define "sweep.expire_select"}}
SELECT id, event_id, retry_count, expires_at, UTC_TIMESTAMP(6) FROM `{{.Outbox}}`
WHERE waiting_expires_at <= UTC_TIMESTAMP(6) AND status IN ('PENDING', 'BLOCKED')
  AND id NOT IN ({{template "queries.busy" .}})
LIMIT ?
FOR UPDATE SKIP LOCKED{{end}}

-- sweep.expire_update ends the locked rows (IDs); ? is now. The message names
-- the deadline as RFC 3339 UTC to the millisecond, as on PostgreSQL.
{{define "sweep.expire_update"}}
UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET status = 'EXPIRED', processed_at = CAST(? AS DATETIME(6)),
    last_error = CONCAT('expired before delivery: deadline was ',
        LEFT(DATE_FORMAT(expires_at, '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')
WHERE id IN ({{.IDs}}){{end}}

-- sweep.block_candidates finds a page (?) of PENDING events that wait behind a
-- FAILED event of their aggregate (sweep.block on PostgreSQL), but for those a claim holds;
-- the sweeper then locks them with SKIP LOCKED and moves them to BLOCKED.
{{define "sweep.block_candidates"}}
SELECT o.id FROM `{{.Outbox}}` o
JOIN (SELECT aggregate_type, aggregate_id, MIN(id) AS id FROM `{{.Outbox}}` WHERE status = 'FAILED'
      GROUP BY aggregate_type, aggregate_id) f
  ON o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
WHERE o.unfinished = 1 AND o.status = 'PENDING' AND o.id > f.id
  AND o.id NOT IN ({{template "queries.busy" .}})
ORDER BY o.id
LIMIT ?{{end}}

-- sweep.unblock_candidates finds a page (second ?) of BLOCKED events with no
-- FAILED event before them, or all of them when FAILED events do not block
-- (first ? false).
{{define "sweep.unblock_candidates"}}
SELECT o.id FROM `{{.Outbox}}` o
LEFT JOIN (SELECT aggregate_type, aggregate_id, MIN(id) AS id FROM `{{.Outbox}}` WHERE status = 'FAILED'
           GROUP BY aggregate_type, aggregate_id) f
  ON ? AND o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id AND f.id < o.id
WHERE o.status = 'BLOCKED' AND f.id IS NULL
ORDER BY o.id
LIMIT ?{{end}}

-- sweep.count_movable counts PROCESSING rows and PENDING rows (held by a claim
-- or not) not held back by a FAILED event (when ?): all PENDING rows (a range of the due index, read
-- from the index alone), less those behind a FAILED event, found from the
-- few FAILED rows through the per-aggregate index.
{{define "sweep.count_movable"}}
SELECT (SELECT COUNT(*) FROM `{{.Outbox}}` WHERE status = 'PROCESSING')
     + (SELECT COUNT(*) FROM `{{.Outbox}}` WHERE status = 'PENDING')
     - (SELECT COUNT(*) FROM (SELECT aggregate_type, aggregate_id, MIN(id) AS id FROM `{{.Outbox}}` WHERE status = 'FAILED'
                              GROUP BY aggregate_type, aggregate_id) f
        JOIN `{{.Outbox}}` o ON o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
          AND o.unfinished = 1 AND o.id > f.id AND o.status = 'PENDING'
        WHERE ?){{end}}

{{define "sweep.insert_attempts"}}INSERT IGNORE INTO `{{.Attempts}}` (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, `error`) VALUES {{.Values}}{{end}}

-- sweep.release gives the rows IDs whose lease of the schema before lanes
-- ran out back; sweep.lock
-- locks the rows IDs still in status ?, skipping those another
-- transaction holds, and sweep.move moves the rows IDs to status ?.
{{define "sweep.release"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET status = 'PENDING', locked_until = NULL,
lock_token = NULL WHERE id IN ({{.IDs}}) AND status = 'PROCESSING'{{end}}

{{define "sweep.lock"}}SELECT id FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE id IN ({{.IDs}})
AND status = ? ORDER BY id FOR UPDATE SKIP LOCKED{{end}}

{{define "sweep.move"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET status = ? WHERE id IN ({{.IDs}}){{end}}
