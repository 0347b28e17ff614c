-- overdue.groups groups the unfinished events past their deadline
-- ({{.OverdueWhere}}, see backend.OverdueWhere): one row per (aggregate
-- type, event type), with the totals of all groups in every row, at most
-- {{.OverdueGroups}} (backend.MaxOverdueGroups).
{{define "overdue.groups"}}
SELECT aggregate_type, event_type, min(aggregate_id), count(*),
    sum(count(*)) OVER ()::bigint, min(min(expires_at)) OVER (), max(max(expires_at)) OVER ()
FROM "{{.Outbox}}" WHERE {{.OverdueWhere}}
GROUP BY aggregate_type, event_type
ORDER BY count(*) DESC, aggregate_type, event_type
LIMIT {{.OverdueGroups}}{{end}}
