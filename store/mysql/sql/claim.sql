-- The claim's read (claim.go), in one REPEATABLE READ read-only
-- transaction, after the relay's claims (lanes.claims_of): the heads of its
-- statements, which Go completes with the lanes, the sizes, the ids of the
-- relay's claims in flight (queries.busy, left out of the window) and the
-- aggregates' keys (placeholders).
--
-- claim.lane_head reads one lane's due PENDING rows in (available_at, id)
-- order, from the lane index; claim.all_head reads every lane's, from the
-- due index, for a relay that holds all 64; claim.deadline_head the due
-- PENDING rows of the lanes with the nearest deadlines, from the expiry
-- index; claim.own_head the rows of the relay's claims in flight that are
-- unfinished; claim.runs the ids of each aggregate's (Parts, numbered,
-- keys as placeholders) first Limit unfinished rows (FAILED counts when
-- FailedBlocks) in id order, from the aggregate index.
{{define "claim.lane_head"}}(SELECT 0, id, lane, aggregate_type, aggregate_id, status, available_at
    FROM `{{.Outbox}}` FORCE INDEX (`{{.Outbox}}_lane_due_idx`)
    WHERE status = 'PENDING' AND available_at <= UTC_TIMESTAMP(6) AND lane = {{end}}

{{define "claim.all_head"}}(SELECT 0, id, lane, aggregate_type, aggregate_id, status, available_at
    FROM `{{.Outbox}}` FORCE INDEX (`{{.Outbox}}_due_idx`)
    WHERE status = 'PENDING' AND available_at <= UTC_TIMESTAMP(6) AND lane IS NOT NULL{{end}}

{{define "claim.deadline_head"}}(SELECT 1, id, lane, aggregate_type, aggregate_id, status, available_at
    FROM `{{.Outbox}}` FORCE INDEX (`{{.Outbox}}_expiry_idx`)
    WHERE waiting_expires_at IS NOT NULL AND status = 'PENDING' AND available_at <= UTC_TIMESTAMP(6) AND lane IN ({{end}}

-- claim.ids_head reads the given rows (Go appends their ids, the relay's
-- lanes and the busy ids) that are PENDING and due, by primary key: the
-- window of a source that learns of new events from the binary log.
{{define "claim.ids_head"}}(SELECT 0, id, lane, aggregate_type, aggregate_id, status, available_at
    FROM `{{.Outbox}}` FORCE INDEX (PRIMARY)
    WHERE status = 'PENDING' AND available_at <= UTC_TIMESTAMP(6) AND id IN ({{end}}

-- claim.present reads which of the given ids have a row.
{{define "claim.present"}}SELECT id FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE id IN ({{.IDs}}){{end}}

{{define "claim.own_head"}}(SELECT 3, id, lane, aggregate_type, aggregate_id, status, available_at
    FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE unfinished = 1 AND id IN ({{end}}

-- claim.clock ends the window with the database clock (part 9).
{{define "claim.clock"}}SELECT 9, 0, NULL, '', '', '', UTC_TIMESTAMP(6){{end}}

-- claim.gaps reads, for each aggregate of the window (named by a row of it,
-- Marks), its gap: its first unfinished row (Cond: FAILED counts, or
-- not) that the read has not seen (IDs: the window's and the queries.busy rows),
-- as "id,lane,status,available_at". It is the first entries of the
-- aggregate index, where the known ids are skipped inside the index; the
-- correlated subquery plays LATERAL's part, once per aggregate.
{{define "claim.gaps"}}SELECT w.id, (SELECT CONCAT_WS(',', x.id, COALESCE(x.lane, -1), x.status, x.available_at)
    FROM `{{.Outbox}}` x FORCE INDEX (`{{.Outbox}}_aggregate_idx`)
    WHERE x.aggregate_type = w.aggregate_type AND x.aggregate_id = w.aggregate_id AND x.unfinished = 1{{.Cond}}
      AND x.id NOT IN ({{.IDs}})
    ORDER BY x.id LIMIT 1)
FROM `{{.Outbox}}` w FORCE INDEX (PRIMARY) WHERE w.id IN ({{.Marks}}){{end}}

{{define "claim.runs"}}{{range $i, $_ := .Parts}}{{if $i}} UNION ALL {{end}}(SELECT {{$i}}, id FROM `{{$.Outbox}}` FORCE INDEX (`{{$.Outbox}}_aggregate_idx`)
    WHERE aggregate_type = ? AND aggregate_id = ? AND unfinished = 1{{if not $.FailedBlocks}} AND status <> 'FAILED'{{end}} ORDER BY id LIMIT {{$.Limit}}){{end}}{{end}}

-- claim.run_rows reads the rows IDs of the runs that the window did not.
{{define "claim.run_rows"}}SELECT 2, id, lane, aggregate_type, aggregate_id, status, available_at
FROM `{{.Outbox}}` FORCE INDEX (PRIMARY) WHERE id IN ({{.IDs}}){{end}}

-- claim.events reads the claimed rows IDs that are still PENDING, with a
-- share lock: an operator's change or the sweeper's waits for the claim,
-- or the claim for it (and it then finds the row changed).
{{define "claim.events"}}SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, retry_count, created_at, expires_at,
    aggregate_seq
FROM `{{.Outbox}}` FORCE INDEX (PRIMARY)
WHERE id IN ({{.IDs}}) AND status = 'PENDING'
ORDER BY id
LOCK IN SHARE MODE{{end}}

-- claim.insert records a claim: token, relay, lanes, their tokens, ids
-- (JSON arrays), at the database clock.
{{define "claim.insert"}}INSERT INTO `{{.Outbox}}_claims` (token, relay_id, lanes, lane_tokens, ids, created_ms)
VALUES (?, ?, ?, ?, ?, {{.NowMS}}){{end}}
