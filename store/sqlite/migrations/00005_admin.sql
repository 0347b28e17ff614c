-- The admin API: relays report a heartbeat row, and the overview's
-- throughput graph counts the last minutes' attempts through an index.
-- Timestamps are UTC text as in 00001. No index is added to the outbox
-- table: SQLite's planner then prefers a (status, id) index to the
-- partial indexes the claim needs, and the list's filters use the partial
-- indexes of the unfinished statuses and the primary key.

-- +goose Up
CREATE TABLE IF NOT EXISTS "{{.Outbox}}_relays" (
    relay_id     TEXT    PRIMARY KEY,
    host         TEXT    NOT NULL,
    started_at   TEXT    NOT NULL,
    heartbeat_at TEXT    NOT NULL,
    in_flight    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS "{{.Attempts}}_finished_idx" ON "{{.Attempts}}" (finished_at, outcome);

-- +goose Down
DROP INDEX IF EXISTS "{{.Attempts}}_finished_idx";
DROP TABLE IF EXISTS "{{.Outbox}}_relays";
