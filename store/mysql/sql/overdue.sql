-- overdue groups the unfinished events past their deadline (see
-- store.OverdueWhere, on the database clock), with the totals of all
-- groups in every row.
{{define "overdue.groups"}}SELECT aggregate_type, event_type, MIN(aggregate_id), COUNT(*),
    CAST(SUM(COUNT(*)) OVER () AS SIGNED), MIN(MIN(expires_at)) OVER (), MAX(MAX(expires_at)) OVER ()
FROM `{{.Outbox}}` WHERE {{.OverdueWhere}} GROUP BY aggregate_type, event_type
ORDER BY COUNT(*) DESC, aggregate_type, event_type LIMIT {{.OverdueGroups}}{{end}}
