-- enqueue.head is the fixed head of the multi-row insert, whose VALUES
-- rows are written per call from placeholders and fixed expressions.
{{define "enqueue.head"}}INSERT INTO "{{.Outbox}}" (event_id, aggregate_type, aggregate_id, event_type, payload, headers, on_expired, expires_at, available_at) VALUES {{end}}
