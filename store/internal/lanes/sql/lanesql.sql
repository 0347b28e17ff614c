-- The lanes' lease statements (lanesql.go, run by lease.go), shared by
-- the backends: {{.Q}} quotes the tables {{.Lanes}} and {{.Members}},
-- P n is the dialect's n-th placeholder, and the other fields are the
-- dialect's fixed fragments (store/internal/dialect). Every value is a bind
-- parameter, but for the fixed fragments: the lane rows to make, and the
-- cursors to write (integers formatted by Go).

-- lanesql.now_ms reads the database clock in Unix milliseconds.
{{define "lanesql.now_ms"}}SELECT {{.ClockMS}}{{end}}

{{define "lanesql.ensure"}}{{.InsertIgnore}} {{.Q}}{{.Lanes}}{{.Q}} (lane, lease_until_ms, next_id) VALUES {{.Values}} {{.Conflict}}{{end}}

{{define "lanesql.count"}}SELECT count(*) FROM {{.Q}}{{.Lanes}}{{.Q}}{{end}}

{{define "lanesql.member"}}INSERT INTO {{.Q}}{{.Members}}{{.Q}} (relay_id, seen_ms) VALUES ({{.P 1}}, {{.P 2}}) {{.Upsert "relay_id"}} seen_ms = {{.Inserted "seen_ms"}}{{end}}

{{define "lanesql.holdings"}}SELECT m.relay_id, (SELECT count(*) FROM {{.Q}}{{.Lanes}}{{.Q}} l
		WHERE l.owner = m.relay_id AND l.lease_until_ms > {{.P 1}}) FROM {{.Q}}{{.Members}}{{.Q}} m WHERE m.seen_ms > {{.P 2}}{{end}}

{{define "lanesql.stale"}}SELECT relay_id FROM {{.Q}}{{.Members}}{{.Q}} WHERE seen_ms < {{.P 1}}{{end}}

{{define "lanesql.prune"}}DELETE FROM {{.Q}}{{.Members}}{{.Q}} WHERE relay_id = {{.P 1}} AND seen_ms < {{.P 2}}{{end}}

{{define "lanesql.leave"}}DELETE FROM {{.Q}}{{.Members}}{{.Q}} WHERE relay_id = {{.P 1}}{{end}}

{{define "lanesql.mine"}}SELECT lane, token, lease_until_ms, next_id FROM {{.Q}}{{.Lanes}}{{.Q}}
		WHERE owner = {{.P 1}} ORDER BY lane {{.Lock}}{{end}}

{{define "lanesql.renew"}}UPDATE {{.Q}}{{.Lanes}}{{.Q}} SET lease_until_ms = {{.P 1}}, next_id = {{.Cursors}}
		WHERE owner = {{.P 2}} AND lane IN ({{.LaneList}}){{end}}

{{define "lanesql.release"}}UPDATE {{.Q}}{{.Lanes}}{{.Q}} SET owner = NULL, token = NULL, lease_until_ms = 0, next_id = {{.Cursors}}
		WHERE owner = {{.P 1}} AND lane IN ({{.LaneList}}){{end}}

{{define "lanesql.free"}}SELECT lane, next_id, owner FROM {{.Q}}{{.Lanes}}{{.Q}}
		WHERE owner IS NULL OR lease_until_ms <= {{.P 1}} OR owner = {{.P 2}}
		ORDER BY lane LIMIT {{.Limit}} {{.Lock}} {{.SkipLocked}}{{end}}

{{define "lanesql.take"}}UPDATE {{.Q}}{{.Lanes}}{{.Q}} SET owner = {{.P 1}}, token = {{.P 2}}, lease_until_ms = {{.P 3}}
		WHERE lane = {{.P 4}} AND (owner IS NULL OR lease_until_ms <= {{.P 5}} OR owner = {{.P 6}}){{end}}
