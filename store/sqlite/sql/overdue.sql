-- overdue.groups groups the unfinished events past their deadline
-- ({{.OverdueWhere}} is backend.OverdueWhere with now as ?1,
-- {{.OverdueGroups}} backend.MaxOverdueGroups), with the totals of all
-- groups in every row.
{{define "overdue.groups"}}
SELECT aggregate_type, event_type, min(aggregate_id), count(*),
    sum(count(*)) OVER (), min(min(expires_at)) OVER (), max(max(expires_at)) OVER ()
FROM "{{.Outbox}}" WHERE {{.OverdueWhere}}
GROUP BY aggregate_type, event_type
ORDER BY count(*) DESC, aggregate_type, event_type
LIMIT {{.OverdueGroups}}{{end}}
