-- compensate.expire ends a page (?2) of waiting events past their deadline
-- (?1 now), returning the columns of the compensation's rows.
{{define "compensate.expire"}}
UPDATE "{{.Outbox}}" SET status = 'EXPIRED', processed_at = ?1,
    last_error = 'expired before delivery: deadline was ' || replace(expires_at, ' ', 'T') || 'Z'
WHERE id IN (
    SELECT id FROM "{{.Outbox}}"
    WHERE status IN ('PENDING', 'BLOCKED') AND expires_at IS NOT NULL AND expires_at <= ?1
      AND id NOT IN ({{template "queries.busy" .}})
    ORDER BY expires_at LIMIT ?2)
RETURNING id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, expires_at, retry_count, on_expired, last_error{{end}}

-- compensate.event_exists tells whether event ? exists.
{{define "compensate.event_exists"}}SELECT EXISTS (SELECT 1 FROM "{{.Outbox}}" WHERE event_id = ?){{end}}
