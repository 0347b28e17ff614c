-- History, as on PostgreSQL (its migration 00014): finished events and
-- their attempts, out of the hot table, kept by month of the event's
-- finish time. SQLite has no partitions: each history table is one table
-- whose rows carry their month (month, 'YYYYMM') under an index, and
-- retention deletes the months it drops by that index, whole months at a
-- time, in one statement per table (docs/HISTORY.md says why this and not
-- a table per month). Drops are recorded in <outbox>_history_drops.
-- History rows are only ever inserted, never updated.
--
-- goose runs this file in a transaction: it must not contain PRAGMAs.

-- +goose Up
CREATE TABLE IF NOT EXISTS "{{.Outbox}}_history" (
    id                    INTEGER NOT NULL,
    event_id              TEXT    NOT NULL,
    aggregate_type        TEXT    NOT NULL,
    aggregate_id          TEXT    NOT NULL,
    aggregate_seq         INTEGER,
    event_type            TEXT    NOT NULL,
    payload               TEXT    NOT NULL,
    headers               TEXT    NOT NULL,
    status                TEXT    NOT NULL,
    retry_count           INTEGER NOT NULL,
    created_at            TEXT    NOT NULL,
    available_at          TEXT    NOT NULL,
    expires_at            TEXT,
    finished_at           TEXT    NOT NULL,
    last_error            TEXT,
    delivered_relay_id    TEXT,
    delivered_attempt     INTEGER,
    delivered_token       TEXT,
    delivered_started_at  TEXT,
    delivered_finished_at TEXT,
    delivered_trace_id    TEXT,
    delivered_receipt     TEXT,
    month                 TEXT    NOT NULL,
    moved_at              TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_history_event_idx" ON "{{.Outbox}}_history" (event_id);
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_history_month_idx" ON "{{.Outbox}}_history" (month);

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_attempts_history" (
    event_id          TEXT    NOT NULL,
    claim_token       TEXT    NOT NULL,
    outcome           TEXT    NOT NULL,
    outbox_id         INTEGER NOT NULL,
    attempt           INTEGER NOT NULL,
    relay_id          TEXT    NOT NULL,
    started_at        TEXT    NOT NULL,
    finished_at       TEXT    NOT NULL,
    error             TEXT,
    trace_id          TEXT,
    receipt           TEXT,
    event_finished_at TEXT    NOT NULL,
    month             TEXT    NOT NULL,
    moved_at          TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_history_a_event_idx" ON "{{.Outbox}}_attempts_history" (event_id);
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_history_a_month_idx" ON "{{.Outbox}}_attempts_history" (month);

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_history_drops" (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    month      TEXT    NOT NULL,
    events     INTEGER NOT NULL,
    attempts   INTEGER NOT NULL,
    cutoff     TEXT    NOT NULL,
    dropped_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

-- +goose Down
DROP TABLE IF EXISTS "{{.Outbox}}_history_drops";
DROP TABLE IF EXISTS "{{.Outbox}}_attempts_history";
DROP TABLE IF EXISTS "{{.Outbox}}_history";
