-- The outbox table keeps the columns of the payment story's payment_outbox
-- table (docs/ARCHITECTURE.md): id, aggregate_id, event_type, payload,
-- status, retry_count, created_at, processed_at, with their names and
-- meanings, and adds what the guarantees need. It is the PostgreSQL
-- schema in SQLite's types:
--
--   * id is INTEGER PRIMARY KEY AUTOINCREMENT, so that an id is never reused,
--     even after the row with the highest id was purged.
--   * event_id and lock_token are UUIDs in their canonical text form.
--   * payload and headers are JSON text, checked with json_valid.
--   * Timestamps are UTC text 'YYYY-MM-DD HH:MM:SS.SSS' (the database clock,
--     strftime('%Y-%m-%d %H:%M:%f', 'now')), which sorts as it compares.
--
-- goose runs this file in a transaction: it must not contain PRAGMAs.

-- +goose Up
CREATE TABLE IF NOT EXISTS "{{.Outbox}}" (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id       TEXT    NOT NULL,
    aggregate_type TEXT    NOT NULL CHECK (length(aggregate_type) <= 100),
    aggregate_id   TEXT    NOT NULL CHECK (length(aggregate_id) <= 100),
    event_type     TEXT    NOT NULL CHECK (length(event_type) <= 200),
    payload        TEXT    NOT NULL CHECK (json_valid(payload)),
    headers        TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(headers)),
    status         TEXT    NOT NULL DEFAULT 'PENDING',
    retry_count    INTEGER NOT NULL DEFAULT 0,
    created_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    processed_at   TEXT,
    available_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    expires_at     TEXT,
    locked_until   TEXT,
    lock_token     TEXT,
    last_error     TEXT,
    CONSTRAINT "{{.Outbox}}_event_id_key" UNIQUE (event_id),
    CONSTRAINT "{{.Outbox}}_status_check" CHECK (status IN
        ('PENDING', 'PROCESSING', 'PROCESSED', 'FAILED', 'EXPIRED', 'BLOCKED', 'SKIPPED'))
);

-- The claim scans due PENDING rows in (available_at, id) order.
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_pending_idx"
    ON "{{.Outbox}}" (available_at, id) WHERE status = 'PENDING';
-- Per-aggregate order: the head of an aggregate is its lowest unfinished id.
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_aggregate_idx"
    ON "{{.Outbox}}" (aggregate_type, aggregate_id, id)
    WHERE status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED');
-- FAILED events hold back their aggregate; BLOCKED rows wait for them.
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_failed_idx"
    ON "{{.Outbox}}" (aggregate_type, aggregate_id, id) WHERE status = 'FAILED';
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_blocked_idx"
    ON "{{.Outbox}}" (id) WHERE status = 'BLOCKED';
-- The reaper finds leases that ended.
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_lease_idx"
    ON "{{.Outbox}}" (locked_until) WHERE status = 'PROCESSING';
-- The sweeper expires waiting events past their deadline.
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_expiry_idx"
    ON "{{.Outbox}}" (expires_at) WHERE status IN ('PENDING', 'BLOCKED') AND expires_at IS NOT NULL;

-- What FAILED, why and when.
CREATE TABLE IF NOT EXISTS "{{.DeadLetters}}" (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    outbox_id      INTEGER NOT NULL,
    event_id       TEXT    NOT NULL,
    aggregate_type TEXT    NOT NULL,
    aggregate_id   TEXT    NOT NULL,
    event_type     TEXT    NOT NULL,
    payload        TEXT    NOT NULL,
    headers        TEXT    NOT NULL,
    retry_count    INTEGER NOT NULL,
    reason         TEXT    NOT NULL,
    failed_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    requeued_at    TEXT
);
CREATE INDEX IF NOT EXISTS "{{.DeadLetters}}_event_idx" ON "{{.DeadLetters}}" (event_id);
-- Requeue and purge find an event's dead letters by its row id.
CREATE INDEX IF NOT EXISTS "{{.DeadLetters}}_outbox_idx" ON "{{.DeadLetters}}" (outbox_id);

-- The audit trail: one row per delivery attempt and per operator action.
-- The key makes a replayed completion write nothing twice.
CREATE TABLE IF NOT EXISTS "{{.Attempts}}" (
    event_id    TEXT    NOT NULL,
    claim_token TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    outbox_id   INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    relay_id    TEXT    NOT NULL,
    started_at  TEXT    NOT NULL,
    finished_at TEXT    NOT NULL,
    error       TEXT,
    PRIMARY KEY (event_id, claim_token, outcome)
);

-- +goose Down
DROP TABLE IF EXISTS "{{.Attempts}}";
DROP TABLE IF EXISTS "{{.DeadLetters}}";
DROP TABLE IF EXISTS "{{.Outbox}}";
