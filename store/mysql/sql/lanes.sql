-- lanes.claims_of reads a relay's claims in flight.
{{define "lanes.claims_of"}}SELECT token, lanes, lane_tokens, ids FROM `{{.Outbox}}_claims` WHERE relay_id = ?{{end}}

-- lanes.leases reads the lanes Marks (integers) with a share lock, which
-- keeps a balance from taking them until the transaction ends: each one's
-- token, lease end, and whether the lease ends more than ? ms after the
-- database clock; and the clock.
{{define "lanes.leases"}}SELECT lane, token, lease_until_ms, lease_until_ms > {{.NowMS}} + ?, UTC_TIMESTAMP(6)
FROM `{{.Outbox}}_lanes` WHERE lane IN ({{.Marks}}) ORDER BY lane LOCK IN SHARE MODE{{end}}

-- The hot path's statements over an id list (IDs, integers formatted in
-- Go) or with per-call fragments (see fragments in queries.go).
--
-- lanes.hold_block moves the PENDING rows IDs behind a FAILED head to BLOCKED;
-- lanes.hold_defer pushes the PENDING rows IDs behind a head in backoff to the
-- head's available_at, Cases mapping each id to its placeholder (the
-- arguments twice).
{{define "lanes.hold_block"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET status = 'BLOCKED' WHERE id IN ({{.IDs}}) AND status = 'PENDING'{{end}}

{{define "lanes.hold_defer"}}UPDATE `{{.Outbox}}` FORCE INDEX (PRIMARY) SET available_at = CAST(CASE id{{.Cases}} END AS DATETIME(6))
WHERE id IN ({{.IDs}}) AND status = 'PENDING' AND available_at < CAST(CASE id{{.Cases}} END AS DATETIME(6)){{end}}

-- lanes.now reads the database clock.
{{define "lanes.now"}}SELECT UTC_TIMESTAMP(6){{end}}
