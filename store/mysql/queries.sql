-- The fixed SQL of the MySQL store: one named statement per define block,
-- rendered by store/mysql/queries.go with internal/sqltext, the template
-- syntax of the migrations. The tables are .Outbox, .DeadLetters and
-- .Attempts between backticks; the claim's window sizes and id lists are
-- integers formatted in Go, fixed fragments; every other value is a bind
-- parameter (?).
--
-- The statements translate the PostgreSQL backend's
-- (store/postgres/queries.go); where PostgreSQL does a step in one
-- statement with data-modifying CTEs, LATERAL and RETURNING, which MariaDB
-- lacks, the step here is a few statements (reads without locks, then a
-- short READ COMMITTED transaction that changes rows by primary key), and
-- the choices between them are made in Go (claim.go, lanes.go,
-- complete.go, sweep.go).

-- busy lists the rows the claims in flight hold: a PENDING row among them
-- is PROCESSING (migration 00007).
{{define "busy"}}SELECT j.id FROM `{{.Outbox}}_claims` bc,
    JSON_TABLE(bc.ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j{{end}}

-- The claim's read (claim.go), in one REPEATABLE READ read-only
-- transaction, after the relay's claims (claims_of): the heads of its
-- statements, which Go completes with the lanes, the sizes, the ids of the
-- relay's claims in flight (busy, left out of the window) and the
-- aggregates' keys (placeholders).
--
-- claim_lane_head reads one lane's due PENDING rows in (available_at, id)
-- order, from the lane index; claim_all_head reads every lane's, from the
-- due index, for a relay that holds all 64 (both after "(SELECT 0, "); claim_deadline_head the due
-- PENDING rows of the lanes with the nearest deadlines, from the expiry
-- index; claim_own_head the rows of the relay's claims in flight that are
-- unfinished; claim_run_head the ids of an aggregate's first unfinished
-- rows in id order, from the aggregate index (after "(SELECT <part>, ").
{{define "claim_lane_head"}}id, lane, aggregate_type, aggregate_id, status, available_at
    FROM `{{.Outbox}}` FORCE INDEX (`{{.Outbox}}_lane_due_idx`)
    WHERE status = 'PENDING' AND available_at <= UTC_TIMESTAMP(6) AND lane = {{end}}

{{define "claim_all_head"}}id, lane, aggregate_type, aggregate_id, status, available_at
    FROM `{{.Outbox}}` FORCE INDEX (`{{.Outbox}}_due_idx`)
    WHERE status = 'PENDING' AND available_at <= UTC_TIMESTAMP(6) AND lane IS NOT NULL{{end}}

{{define "claim_deadline_head"}}(SELECT 1, id, lane, aggregate_type, aggregate_id, status, available_at
    FROM `{{.Outbox}}` FORCE INDEX (`{{.Outbox}}_expiry_idx`)
    WHERE waiting_expires_at IS NOT NULL AND status = 'PENDING' AND available_at <= UTC_TIMESTAMP(6) AND lane IN ({{end}}

{{define "claim_own_head"}}(SELECT 3, id, lane, aggregate_type, aggregate_id, status, available_at
    FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE unfinished = 1 AND id IN ({{end}}

-- claim_gaps reads, for each aggregate of the window (named by a row of it,
-- Marks), its gap: its first unfinished row (Cond: FAILED counts, or
-- not) that the read has not seen (IDs: the window's and the busy rows),
-- as "id,lane,status,available_at". It is the first entries of the
-- aggregate index, where the known ids are skipped inside the index; the
-- correlated subquery plays LATERAL's part, once per aggregate.
{{define "claim_gaps"}}SELECT w.id, (SELECT CONCAT_WS(',', x.id, COALESCE(x.lane, -1), x.status, x.available_at)
    FROM `{{.Outbox}}` x FORCE INDEX (`{{.Outbox}}_aggregate_idx`)
    WHERE x.aggregate_type = w.aggregate_type AND x.aggregate_id = w.aggregate_id AND x.unfinished = 1{{.Cond}}
      AND x.id NOT IN ({{.IDs}})
    ORDER BY x.id LIMIT 1)
FROM `{{.Outbox}}` w FORCE INDEX (PRIMARY) WHERE w.id IN ({{.Marks}}){{end}}

{{define "claim_run_head"}}id FROM `{{.Outbox}}` FORCE INDEX (`{{.Outbox}}_aggregate_idx`)
    WHERE aggregate_type = ? AND aggregate_id = ? AND unfinished = 1{{end}}

-- claim_run_rows reads the rows IDs of the runs that the window did not.
{{define "claim_run_rows"}}SELECT 2, id, lane, aggregate_type, aggregate_id, status, available_at
FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE id IN ({{.IDs}}){{end}}

-- claims_of reads a relay's claims in flight.
{{define "claims_of"}}SELECT token, lanes, lane_tokens, ids FROM `{{.Outbox}}_claims` WHERE relay_id = ?{{end}}

-- lane_leases reads the lanes Marks (integers) with a share lock, which
-- keeps a balance from taking them until the transaction ends: each one's
-- token, lease end, and whether the lease ends more than ? ms after the
-- database clock; and the clock.
{{define "lane_leases"}}SELECT lane, token, lease_until_ms, lease_until_ms > {{.NowMS}} + ?, UTC_TIMESTAMP(6)
FROM `{{.Outbox}}_lanes` WHERE lane IN ({{.Marks}}) ORDER BY lane LOCK IN SHARE MODE{{end}}

-- claim_events reads the claimed rows IDs that are still PENDING, with a
-- share lock: an operator's change or the sweeper's waits for the claim,
-- or the claim for it (and it then finds the row changed).
{{define "claim_events"}}SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, created_at, expires_at,
    aggregate_seq
FROM `{{.Outbox}}` FORCE INDEX (PRIMARY)
WHERE id IN ({{.IDs}}) AND status = 'PENDING'
ORDER BY id
LOCK IN SHARE MODE{{end}}

-- claim_insert records a claim: token, relay, lanes, their tokens, ids
-- (JSON arrays), at the database clock.
{{define "claim_insert"}}INSERT INTO `{{.Outbox}}_claims` (token, relay_id, lanes, lane_tokens, ids, created_ms)
VALUES (?, ?, ?, ?, ?, {{.NowMS}}){{end}}

-- all_claims lists the claims, oldest first (the sweeper's candidates),
-- and all_lanes the live lanes' tokens.
{{define "all_claims"}}SELECT token, lanes, lane_tokens FROM `{{.Outbox}}_claims` ORDER BY created_ms, token{{end}}

{{define "all_lanes"}}SELECT lane, token FROM `{{.Outbox}}_lanes` WHERE token IS NOT NULL AND lease_until_ms > {{.NowMS}}{{end}}

-- dead_claims locks the claims Marks (placeholders) the sweeper found dead,
-- skipping those a completion holds, with their ids.
{{define "dead_claims"}}SELECT token, ids FROM `{{.Outbox}}_claims` WHERE token IN ({{.Marks}}) ORDER BY token FOR UPDATE SKIP LOCKED{{end}}

{{define "dead_claim_rows"}}SELECT id, event_id, retry_count, UTC_TIMESTAMP(6) FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE id IN ({{.IDs}}) ORDER BY id{{end}}

{{define "dead_claims_delete"}}DELETE FROM `{{.Outbox}}_claims` WHERE token IN ({{.Marks}}){{end}}

-- row_busy tells whether a claim holds row ?.
{{define "row_busy"}}SELECT EXISTS ({{template "busy" .}} WHERE j.id = ?){{end}}

-- reap_select locks a page (?) of rows PROCESSING under a lease of the
-- schema before lanes (migration 00007) whose lease ended, skipping rows
-- another transaction holds, with the claim token they had. The
-- PROCESSING range of the due index holds only those rows.
{{define "reap_select"}}
SELECT id, event_id, lock_token, retry_count, locked_until, UTC_TIMESTAMP(6) FROM `{{.Outbox}}`
WHERE status = 'PROCESSING' AND locked_until < UTC_TIMESTAMP(6)
LIMIT ?
FOR UPDATE SKIP LOCKED{{end}}

-- expire_select locks a page (?) of waiting events past their deadline,
-- from the expiry index (waiting_expires_at is NULL for other rows), but
-- for those a claim holds.
{{define "expire_select"}}
SELECT id, event_id, retry_count, expires_at, UTC_TIMESTAMP(6) FROM `{{.Outbox}}`
WHERE waiting_expires_at <= UTC_TIMESTAMP(6) AND status IN ('PENDING', 'BLOCKED')
  AND id NOT IN ({{template "busy" .}})
LIMIT ?
FOR UPDATE SKIP LOCKED{{end}}

-- expire_update ends the locked rows (IDs); ? is now. The message names
-- the deadline as RFC 3339 UTC to the millisecond, as on PostgreSQL.
{{define "expire_update"}}
UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET status = 'EXPIRED', processed_at = CAST(? AS DATETIME(6)),
    last_error = CONCAT('expired before delivery: deadline was ',
        LEFT(DATE_FORMAT(expires_at, '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')
WHERE id IN ({{.IDs}}){{end}}

-- block_candidates finds a page (?) of PENDING events that wait behind a
-- FAILED event of their aggregate (blockSQL), but for those a claim holds;
-- the sweeper then locks them with SKIP LOCKED and moves them to BLOCKED.
{{define "block_candidates"}}
SELECT o.id FROM `{{.Outbox}}` o
JOIN (SELECT aggregate_type, aggregate_id, MIN(id) AS id FROM `{{.Outbox}}` WHERE status = 'FAILED'
      GROUP BY aggregate_type, aggregate_id) f
  ON o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
WHERE o.unfinished = 1 AND o.status = 'PENDING' AND o.id > f.id
  AND o.id NOT IN ({{template "busy" .}})
ORDER BY o.id
LIMIT ?{{end}}

-- unblock_candidates finds a page (second ?) of BLOCKED events with no
-- FAILED event before them, or all of them when FAILED events do not block
-- (first ? false).
{{define "unblock_candidates"}}
SELECT o.id FROM `{{.Outbox}}` o
LEFT JOIN (SELECT aggregate_type, aggregate_id, MIN(id) AS id FROM `{{.Outbox}}` WHERE status = 'FAILED'
           GROUP BY aggregate_type, aggregate_id) f
  ON ? AND o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id AND f.id < o.id
WHERE o.status = 'BLOCKED' AND f.id IS NULL
ORDER BY o.id
LIMIT ?{{end}}

-- count_movable counts PROCESSING rows and PENDING rows (held by a claim
-- or not) not held back by a FAILED event (when ?): all PENDING rows (a range of the due index, read
-- from the index alone), less those behind a FAILED event, found from the
-- few FAILED rows through the per-aggregate index.
{{define "count_movable"}}
SELECT (SELECT COUNT(*) FROM `{{.Outbox}}` WHERE status = 'PROCESSING')
     + (SELECT COUNT(*) FROM `{{.Outbox}}` WHERE status = 'PENDING')
     - (SELECT COUNT(*) FROM (SELECT aggregate_type, aggregate_id, MIN(id) AS id FROM `{{.Outbox}}` WHERE status = 'FAILED'
                              GROUP BY aggregate_type, aggregate_id) f
        JOIN `{{.Outbox}}` o ON o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
          AND o.unfinished = 1 AND o.id > f.id AND o.status = 'PENDING'
        WHERE ?){{end}}

-- blocked_aggregates lists the first 100 aggregates held back by a FAILED
-- event (with the event and how many events wait behind it), and how many
-- there are in all.
{{define "blocked_aggregates"}}
WITH f AS (
    SELECT aggregate_type, aggregate_id, MIN(id) AS id FROM `{{.Outbox}}` WHERE status = 'FAILED'
    GROUP BY aggregate_type, aggregate_id
),
b AS (
    SELECT f.aggregate_type, f.aggregate_id, (SELECT e.event_id FROM `{{.Outbox}}` e WHERE e.id = f.id) AS event_id,
        (SELECT COUNT(*) FROM `{{.Outbox}}` o WHERE o.aggregate_type = f.aggregate_type AND o.aggregate_id = f.aggregate_id
           AND o.unfinished = 1 AND o.id > f.id AND o.status IN ('PENDING', 'BLOCKED')) AS waiting
    FROM f
)
SELECT aggregate_type, aggregate_id, event_id, waiting, COUNT(*) OVER () FROM b
WHERE waiting > 0 ORDER BY aggregate_type, aggregate_id LIMIT 100{{end}}

-- The figures of Stats: the rows by status, and the PENDING rows a claim
-- holds (PROCESSING).
{{define "stats"}}SELECT status, COUNT(*) FROM `{{.Outbox}}` GROUP BY status{{end}}

{{define "busy_pending"}}SELECT COUNT(DISTINCT o.id) FROM ({{template "busy" .}}) b
JOIN `{{.Outbox}}` o ON o.id = b.id WHERE o.status = 'PENDING'{{end}}

{{define "oldest_pending"}}SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) FROM `{{.Outbox}}` WHERE status = 'PENDING'{{end}}

{{define "dead_letter_count"}}SELECT COUNT(*) FROM `{{.DeadLetters}}` WHERE requeued_at IS NULL{{end}}

-- record_from joins each outbox row (o) to the claim that holds it, if
-- any (cl): RecordColumns read a PENDING row a claim holds as PROCESSING.
{{define "record_from"}} FROM `{{.Outbox}}` o LEFT JOIN (
    SELECT j.id AS cid, MIN(bc.token) AS token FROM `{{.Outbox}}_claims` bc,
        JSON_TABLE(bc.ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j GROUP BY j.id
) cl ON cl.cid = o.id{{end}}

-- One event's row, by its event id (?).
{{define "get_record"}}SELECT {{.RecordColumns}}{{template "record_from" .}} WHERE o.event_id = ?{{end}}

-- overdue groups the unfinished events past their deadline (see
-- store.OverdueWhere, on the database clock), with the totals of all
-- groups in every row.
{{define "overdue"}}SELECT aggregate_type, event_type, MIN(aggregate_id), COUNT(*),
    CAST(SUM(COUNT(*)) OVER () AS SIGNED), MIN(MIN(expires_at)) OVER (), MAX(MAX(expires_at)) OVER ()
FROM `{{.Outbox}}` WHERE {{.OverdueWhere}} GROUP BY aggregate_type, event_type
ORDER BY COUNT(*) DESC, aggregate_type, event_type LIMIT {{.OverdueGroups}}{{end}}

-- The operator's statements (admin.go). list_events, count_matching and
-- select_matching are the fixed heads of statements whose WHERE is written
-- from a filter's fixed fragments and bind parameters.
{{define "list_events"}}SELECT {{.RecordColumns}}{{template "record_from" .}}{{end}}

{{define "count_matching"}}SELECT COUNT(*) FROM `{{.Outbox}}` WHERE {{end}}

{{define "select_matching"}}SELECT id, event_id FROM `{{.Outbox}}` WHERE {{end}}

-- The audit trail of event ? (given twice), in the order the attempts
-- finished: its rows in the attempts table and the delivery recorded on
-- the event row (migration 00006).
{{define "attempts"}}SELECT attempt, relay_id, claim_token, started_at, finished_at, outcome, COALESCE(`error`, ''), COALESCE(trace_id, '')
FROM `{{.Attempts}}` WHERE event_id = ?
UNION ALL
SELECT delivered_attempt, delivered_relay_id, COALESCE(delivered_token, ''), delivered_started_at, delivered_finished_at,
    'DELIVERED', '', COALESCE(delivered_trace_id, '')
FROM `{{.Outbox}}` WHERE event_id = ? AND delivered_relay_id IS NOT NULL
ORDER BY 1, 5, 4{{end}}

-- The dead letters, newest first, at most ?.
{{define "dead_letters"}}SELECT id, outbox_id, event_id, aggregate_type, aggregate_id, event_type, retry_count,
reason, failed_at, requeued_at FROM `{{.DeadLetters}}` ORDER BY id DESC LIMIT ?{{end}}

-- operator_lock locks the row of event ? for an operator action, with the
-- database clock (row_busy then tells whether a claim holds it).
{{define "operator_lock"}}SELECT id, status, retry_count, aggregate_type, aggregate_id, UTC_TIMESTAMP(6) FROM `{{.Outbox}}`
WHERE event_id = ? FOR UPDATE{{end}}

-- operator_requeue gives a row a fresh chance now (the placeholders: now,
-- the new deadline in microseconds or NULL twice, now, now, the row id); a
-- passed deadline is removed unless a new one is given. A row finished
-- before migration 00007 gets its lane.
{{define "operator_requeue"}}UPDATE `{{.Outbox}}` SET status = 'PENDING', available_at = CAST(? AS DATETIME(6)), processed_at = NULL,
locked_until = NULL, lock_token = NULL, lane = COALESCE(lane, {{.LaneOf}}),
expires_at = CASE WHEN ? IS NOT NULL THEN CAST(? AS DATETIME(6)) + INTERVAL ? MICROSECOND
WHEN expires_at <= CAST(? AS DATETIME(6)) THEN NULL ELSE expires_at END
WHERE id = ?{{end}}

{{define "operator_requeue_dead"}}UPDATE `{{.DeadLetters}}` SET requeued_at = CAST(? AS DATETIME(6))
WHERE outbox_id = ? AND requeued_at IS NULL{{end}}

{{define "operator_set_status"}}UPDATE `{{.Outbox}}` SET status = ? WHERE id = ?{{end}}

-- operator_audit records an operator action as an attempt row.
{{define "operator_audit"}}INSERT INTO `{{.Attempts}}` ({{.AttemptColumns}})
VALUES (?, ?, ?, ?, ?, ?, CAST(? AS DATETIME(6)), CAST(? AS DATETIME(6)), ?){{end}}

-- move_delivery copies the delivery recorded on row ? into the attempts
-- table (a step run again writes nothing twice), and clear_delivery
-- clears it from row ?, before an operator action changes the row: a
-- second delivery then overwrites nothing.
{{define "move_delivery"}}INSERT IGNORE INTO `{{.Attempts}}` (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, trace_id)
SELECT event_id, COALESCE(delivered_token, UUID()), 'DELIVERED', id, COALESCE(delivered_attempt, 0), delivered_relay_id,
    COALESCE(delivered_started_at, delivered_finished_at, UTC_TIMESTAMP(6)), COALESCE(delivered_finished_at, UTC_TIMESTAMP(6)), delivered_trace_id
FROM `{{.Outbox}}` WHERE id = ? AND delivered_relay_id IS NOT NULL{{end}}

{{define "clear_delivery"}}UPDATE `{{.Outbox}}` SET delivered_relay_id = NULL, delivered_attempt = NULL, delivered_started_at = NULL,
delivered_finished_at = NULL, delivered_trace_id = NULL, delivered_token = NULL
WHERE id = ? AND delivered_relay_id IS NOT NULL{{end}}

-- The first FAILED event of aggregate (?, ?), and the BLOCKED events it
-- does not hold back: all of them, or (operator_blocked_before) those
-- before id ?. Read without locks, then changed by primary key
-- (operator_unblock, over the id list IDs).
{{define "operator_first_failed"}}SELECT MIN(id) FROM `{{.Outbox}}` WHERE aggregate_type = ? AND aggregate_id = ?
AND unfinished = 1 AND status = 'FAILED'{{end}}

{{define "operator_blocked"}}SELECT id FROM `{{.Outbox}}` WHERE aggregate_type = ? AND aggregate_id = ? AND unfinished = 1 AND status = 'BLOCKED'{{end}}

{{define "operator_blocked_before"}}{{template "operator_blocked" .}} AND id < ?{{end}}

{{define "operator_unblock"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET status = 'PENDING' WHERE id IN ({{.IDs}}) AND status = 'BLOCKED'{{end}}

-- A purge's page: of the ? rows after id ?, whether each is purgeable (a
-- final status of the list In, finished before the cutoff, now minus ?
-- microseconds, and meeting Cond: on an adopted table, finished after the
-- adoption), whether it is older than the cutoff, and the cutoff. In
-- holds store status names, validated constants quoted in Go.
{{define "purge_page"}}SELECT id, (status IN ({{.In}}) AND processed_at IS NOT NULL AND processed_at <= c.cutoff{{.Cond}}),
created_at <= c.cutoff, c.cutoff FROM `{{.Outbox}}` JOIN (SELECT UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AS cutoff) c
WHERE id > ? ORDER BY id LIMIT ?{{end}}

-- purge_lock locks the rows IDs that are still purgeable at the cutoff ?,
-- skipping those another transaction holds; the purge_delete_* statements
-- delete them with their attempts (event ids Marks, placeholders) and
-- dead letters.
{{define "purge_lock"}}SELECT id, event_id FROM `{{.Outbox}}` WHERE id IN ({{.IDs}}) AND status IN ({{.In}})
AND processed_at <= CAST(? AS DATETIME(6)){{.Cond}} ORDER BY id FOR UPDATE SKIP LOCKED{{end}}

{{define "purge_delete_attempts"}}DELETE FROM `{{.Attempts}}` WHERE event_id IN ({{.Marks}}){{end}}

{{define "purge_delete_dead"}}DELETE FROM `{{.DeadLetters}}` WHERE outbox_id IN ({{.IDs}}){{end}}

{{define "purge_delete"}}DELETE FROM `{{.Outbox}}` WHERE id IN ({{.IDs}}){{end}}

-- The hot path's statements over an id list (IDs, integers formatted in
-- Go) or with per-call fragments (see fragments in queries.go).
--
-- hold_block moves the PENDING rows IDs behind a FAILED head to BLOCKED;
-- hold_defer pushes the PENDING rows IDs behind a head in backoff to the
-- head's available_at, Cases mapping each id to its placeholder (the
-- arguments twice).
{{define "hold_block"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET status = 'BLOCKED' WHERE id IN ({{.IDs}}) AND status = 'PENDING'{{end}}

{{define "hold_defer"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET available_at = CAST(CASE id{{.Cases}} END AS DATETIME(6))
WHERE id IN ({{.IDs}}) AND status = 'PENDING' AND available_at < CAST(CASE id{{.Cases}} END AS DATETIME(6)){{end}}

-- insert_attempts writes the attempt rows Values (without trace ids).
{{define "insert_attempts"}}INSERT IGNORE INTO `{{.Attempts}}` (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, `error`) VALUES {{.Values}}{{end}}

-- sweep_release gives the rows IDs whose lease of the schema before lanes
-- ran out back; sweep_lock
-- locks the rows IDs still in status ?, skipping those another
-- transaction holds, and sweep_move moves the rows IDs to status ?.
{{define "sweep_release"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET status = 'PENDING', locked_until = NULL,
lock_token = NULL WHERE id IN ({{.IDs}}) AND status = 'PROCESSING'{{end}}

{{define "sweep_lock"}}SELECT id FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE id IN ({{.IDs}})
AND status = ? ORDER BY id FOR UPDATE SKIP LOCKED{{end}}

{{define "sweep_move"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET status = ? WHERE id IN ({{.IDs}}){{end}}

-- compensate_select reads the EXPIRED rows IDs that carry a compensation;
-- existing_events which of the event ids Marks exist already.
{{define "compensate_select"}}SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, expires_at, retry_count, on_expired
FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE id IN ({{.IDs}}) AND status = 'EXPIRED' AND on_expired IS NOT NULL ORDER BY id{{end}}

{{define "existing_events"}}SELECT event_id FROM `{{.Outbox}}` WHERE event_id IN ({{.Marks}}){{end}}

-- The heads of the producer's multi-row inserts: the rows (placeholders
-- and fixed expressions) follow, written by enqueue.go. The aggregates
-- table's rows are locked in key order by inserting them.
{{define "enqueue_head"}}INSERT INTO `{{.Outbox}}` (event_id, aggregate_type, aggregate_id, event_type, payload, headers, on_expired, status, created_at, expires_at, available_at, aggregate_seq) VALUES {{end}}

{{define "lock_aggregates_head"}}INSERT INTO `{{.Outbox}}_aggregates` (aggregate_type, aggregate_id, last_seq) VALUES {{end}}
