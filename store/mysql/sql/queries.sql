-- The fixed SQL of the MySQL store, one file per step (sql/<step>.sql),
-- one named statement <step>.<name> per define block, rendered by
-- store/mysql/queries.go with internal/sqltext, the template
-- syntax of the migrations. The tables are .Outbox, .DeadLetters and
-- .Attempts between backticks; the claim's window sizes and id lists are
-- integers formatted in Go, fixed fragments; every other value is a bind
-- parameter (?).
--
-- The statements translate the PostgreSQL backend's
-- (store/postgres/sql); where PostgreSQL does a step in one
-- statement with data-modifying CTEs, LATERAL and RETURNING, which MariaDB
-- lacks, the step here is a few statements (reads without locks, then a
-- short READ COMMITTED transaction that changes rows by primary key), and
-- the choices between them are made in Go (claim.go, lanes.go,
-- complete.go, sweep.go).

-- queries.busy lists the rows the claims in flight hold: a PENDING row among them
-- is PROCESSING (migration 00007).
{{define "queries.busy"}}SELECT j.id FROM `{{.Outbox}}_claims` bc,
    JSON_TABLE(bc.ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j{{end}}
