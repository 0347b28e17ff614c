-- The admin API: relays report a heartbeat row, and the event list's
-- filters on an aggregate (any status) and on the rare final statuses
-- read an index instead of the whole table (PENDING, PROCESSING and
-- BLOCKED have partial indexes already; PROCESSED rows are most rows, so
-- the primary key finds the newest at once). The status index is partial
-- so that the hot path (PENDING -> PROCESSING -> PROCESSED) never writes it.

-- +goose Up
SET LOCAL lock_timeout = '10s';

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_relays" (
    relay_id     VARCHAR(200) PRIMARY KEY,
    host         VARCHAR(200) NOT NULL,
    started_at   TIMESTAMPTZ  NOT NULL,
    heartbeat_at TIMESTAMPTZ  NOT NULL,
    in_flight    INT          NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_status_id_idx" ON "{{.Outbox}}" (status, id)
    WHERE status IN ('FAILED', 'EXPIRED', 'SKIPPED');
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_aggregate_all_idx" ON "{{.Outbox}}" (aggregate_type, aggregate_id, id);
-- The overview's throughput graph counts the last minutes' attempts.
CREATE INDEX IF NOT EXISTS "{{.Attempts}}_finished_idx" ON "{{.Attempts}}" (finished_at, outcome);

-- +goose Down
DROP INDEX IF EXISTS "{{.Attempts}}_finished_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_aggregate_all_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_status_id_idx";
DROP TABLE IF EXISTS "{{.Outbox}}_relays";
