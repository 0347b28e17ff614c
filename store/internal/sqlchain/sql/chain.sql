-- The audit chain's reads and the audit log's writes (chain.go), shared by
-- the backends: Q is the dialect's identifier quote around the validated
-- table names (Head, Chain, Log, and Table, the table of a kind's records);
-- P n is the dialect's n-th placeholder; Ref pre and Digest pre render a
-- record's ref and digest (records.go), the same expressions the schema's
-- chain triggers use; Conds is a list of key conditions made of
-- placeholders. Every value is a bind parameter.

-- chain.head reads the last link (none: link 0, the genesis hash) and when
-- the chain began.
{{define "chain.head"}}SELECT COALESCE(l.seq, 0), COALESCE(l.hash, {{.Genesis}}), h.genesis_ms FROM {{.Q}}{{.Head}}{{.Q}} h
LEFT JOIN (SELECT seq, hash FROM {{.Q}}{{.Chain}}{{.Q}} ORDER BY seq DESC LIMIT 1) l ON 1 = 1 WHERE h.id = 1{{end}}

{{define "chain.links"}}SELECT seq, kind, ref, digest, hash, chained_ms, record_ms FROM {{.Q}}{{.Chain}}{{.Q}}
WHERE seq > {{.P 1}} ORDER BY seq LIMIT {{.P 2}}{{end}}

-- chain.digests reads the records of a kind by key; a kind whose records
-- move (the attempts, into the attempts' history) is read in both tables,
-- the moved ones under MovedConds.
{{define "chain.digests"}}SELECT {{.Ref ""}}, {{.Digest ""}} FROM {{.Q}}{{.Table}}{{.Q}} WHERE {{.Conds}}
{{- if .Moved}} UNION ALL SELECT {{.Ref ""}}, {{.Digest ""}} FROM {{.Q}}{{.Moved}}{{.Q}} WHERE {{.MovedConds}}{{end}}{{end}}

-- chain.unchained: the records of a kind written since the chain began ($1)
-- that no link of that kind ($2) names.
{{define "chain.unchained"}} FROM {{.Q}}{{.Table}}{{.Q}} x WHERE x.{{.Written}} >= {{.P 1}}
  AND NOT EXISTS (SELECT 1 FROM {{.Q}}{{.Chain}}{{.Q}} c WHERE c.kind = {{.P 2}} AND c.ref = {{.Ref "x."}}){{end}}

{{define "chain.count_unchained"}}SELECT count(*){{template "chain.unchained" .}}{{end}}

{{define "chain.sample_unchained"}}SELECT {{.Ref "x."}}{{template "chain.unchained" .}} LIMIT 5{{end}}

{{define "chain.count_before"}}SELECT count(*) FROM {{.Q}}{{.Table}}{{.Q}} WHERE {{.Written}} < {{.P 1}}{{end}}

{{define "chain.add_note"}}INSERT INTO {{.Q}}{{.Log}}{{.Q}} (at_ms, kind, actor, detail)
VALUES ({{.Clock}}, {{.P 1}}, {{.P 2}}, {{.P 3}}){{if .Returning}} RETURNING id{{end}}{{end}}

{{define "chain.notes"}}SELECT id, at_ms, kind, actor, detail FROM {{.Q}}{{.Log}}{{.Q}} WHERE kind = {{.P 1}} ORDER BY id{{end}}
