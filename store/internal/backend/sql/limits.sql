-- limits.overdue_where is the condition of an overdue row, in SQL common to
-- the backends; {{.Now}} is the backend's database clock (a fixed
-- expression, or a bind parameter).
{{define "limits.overdue_where"}}expires_at IS NOT NULL AND expires_at <= {{.Now}}
    AND (status IN ('PENDING', 'BLOCKED') OR (status = 'PROCESSING' AND locked_until < {{.Now}})){{end}}
