-- enqueue.head is the head of the multi-row insert: the VALUES list that
-- follows, one row of casts and placeholders per event, is written by
-- enqueue.go and closed there.
{{define "enqueue.head"}}INSERT INTO "{{.Outbox}}" (event_id, aggregate_type, aggregate_id, event_type, payload, headers, on_expired, expires_at, available_at) SELECT v.e, v.at, v.ai, v.et, v.p, v.h, v.ox, COALESCE(v.xa, now() + v.ttl * interval '1 microsecond'), COALESCE(v.aa, now() + COALESCE(v.d, 0) * interval '1 microsecond') FROM (VALUES {{end}}

-- enqueue.tail closes the VALUES list; enqueue.locked_tail too, and makes
-- the insert wait for enqueue.lock_aggregates.
{{define "enqueue.tail"}}) AS v(e, at, ai, et, p, h, ox, xa, ttl, aa, d){{end}}

{{define "enqueue.locked_tail"}}{{template "enqueue.tail" .}} WHERE (SELECT count(*) FROM l) >= 0{{end}}

-- enqueue.lock_aggregates heads the insert with the per-aggregate advisory
-- locks, taken in the order of Keys (placeholders of the aggregates' keys,
-- sorted) before any row is written; Table is the placeholder of the
-- outbox table's name.
{{define "enqueue.lock_aggregates"}}WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock(hashtext({{.Table}}), hashtext(k)) FROM unnest(ARRAY[{{range $i, $k := .Keys}}{{if $i}},{{end}}{{$k}}::text{{end}}]) WITH ORDINALITY AS x(k, n) ORDER BY n) {{end}}
