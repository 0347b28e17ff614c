-- The audit chain (store/chain.go). Every row inserted into the attempts
-- table, the route log, the history and the audit log is chained in the inserting
-- transaction by an AFTER INSERT trigger: it adds one link to
-- <outbox>_chain with the record's kind, its ref (key), the SHA-256 of its
-- content (digest, by outbox_sha256: store/sqlite/chain.go) and the link
-- hash over the previous link's hash. SQLite has one writer at a time, so
-- links are numbered and hashed in commit order, without gaps. The clock is
-- read once per statement, so the head's last_ms and the link agree.
-- Records written before this migration are not chained: the head's
-- genesis_ms says when the chain began.

-- +goose Up
CREATE TABLE IF NOT EXISTS "{{.Outbox}}_audit_log" (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms  INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    actor  TEXT    NOT NULL,
    detail TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_audit_log_kind_idx" ON "{{.Outbox}}_audit_log" (kind, id);

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_chain" (
    seq        INTEGER PRIMARY KEY,
    kind       TEXT    NOT NULL,
    ref        TEXT    NOT NULL,
    digest     TEXT    NOT NULL,
    hash       TEXT    NOT NULL,
    chained_ms INTEGER NOT NULL,
    record_ms  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_chain_ref_idx" ON "{{.Outbox}}_chain" (kind, ref);

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_chain_head" (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    seq        INTEGER NOT NULL,
    hash       TEXT    NOT NULL,
    genesis_ms INTEGER NOT NULL,
    last_ms    INTEGER NOT NULL
);
INSERT OR IGNORE INTO "{{.Outbox}}_chain_head" (id, seq, hash, genesis_ms, last_ms)
VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000', {{.ChainClockMS}}, 0);
{{range .ChainKinds}}
-- +goose StatementBegin
CREATE TRIGGER IF NOT EXISTS "{{$.Outbox}}_chain_{{.}}" AFTER INSERT ON "{{$.ChainTableOf .}}" FOR EACH ROW
BEGIN
    UPDATE "{{$.Outbox}}_chain_head" SET seq = seq + 1, last_ms = {{$.ChainClockMS}},
        hash = {{$.ChainLink . "hash" "(seq + 1)" ($.ChainRef . "NEW.") ($.ChainDigest . "NEW.") $.ChainClockMS ($.ChainRecordMS . "NEW." $.ChainClockMS)}}
    WHERE id = 1;
    INSERT INTO "{{$.Outbox}}_chain" (seq, kind, ref, digest, hash, chained_ms, record_ms)
    SELECT seq, '{{.}}', {{$.ChainRef . "NEW."}}, {{$.ChainDigest . "NEW."}}, hash, last_ms, {{$.ChainRecordMS . "NEW." "last_ms"}}
    FROM "{{$.Outbox}}_chain_head" WHERE id = 1;
END;
-- +goose StatementEnd
{{end}}
-- +goose Down
{{range .ChainKinds}}DROP TRIGGER IF EXISTS "{{$.Outbox}}_chain_{{.}}";
{{end}}DROP TABLE IF EXISTS "{{.Outbox}}_chain_head";
DROP TABLE IF EXISTS "{{.Outbox}}_chain";
DROP TABLE IF EXISTS "{{.Outbox}}_audit_log";
