-- lanes.claims_of reads a relay's claims in flight.
{{define "lanes.claims_of"}}SELECT token, lanes, lane_tokens, ids FROM "{{.Outbox}}_claims" WHERE relay_id = ?{{end}}

-- lanes.leases reads the lanes of ?1 (a JSON array): token, lease end, and
-- whether the lease ends more than ?2 ms after the database clock.
{{define "lanes.leases"}}
SELECT lane, token, lease_until_ms, lease_until_ms > CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) + ?2
FROM "{{.Outbox}}_lanes" WHERE lane IN (SELECT value FROM json_each(?1)){{end}}
