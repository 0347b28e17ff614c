-- The producer contract in the database, for producers in any language
-- (docs/PRODUCERS.md). A plain INSERT of aggregate_type, aggregate_id,
-- event_type and payload is enough:
--
--   * event_id defaults to a UUIDv7 (48 bits of Unix milliseconds from the
--     database clock, the rest from random()); headers to '{}', created_at
--     and available_at to the UTC time, as before;
--   * an AFTER INSERT trigger upserts the aggregate's row in
--     <outbox>_aggregates and writes its last_seq into the new row's
--     aggregate_seq (1, 2, 3 ... per aggregate, without gaps: a rolled-back
--     insert rolls back the upsert too). SQLite runs one write transaction
--     at a time, so ids follow commit order and the trigger only numbers.
--
-- SQLite cannot give an existing column a default, so the outbox table is
-- rebuilt (create, copy, drop, rename), keeping every row, its id, and the
-- AUTOINCREMENT counter, so that no id is ever reused. Existing unfinished
-- rows are numbered in id order per aggregate. goose runs this file in one
-- transaction.

-- +goose Up
CREATE TABLE "{{.Outbox}}_rebuild" (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id       TEXT    NOT NULL DEFAULT (lower(printf('%08x-%04x-7%03x-%x%03x-%012x',
                       (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) >> 16) & 0xffffffff,
                       CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) & 0xffff,
                       random() & 0xfff, 8 + (random() & 3), random() & 0xfff, random() & 0xffffffffffff))),
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
    aggregate_seq  INTEGER,
    CONSTRAINT "{{.Outbox}}_event_id_key" UNIQUE (event_id),
    CONSTRAINT "{{.Outbox}}_status_check" CHECK (status IN
        ('PENDING', 'PROCESSING', 'PROCESSED', 'FAILED', 'EXPIRED', 'BLOCKED', 'SKIPPED'))
);

INSERT INTO "{{.Outbox}}_rebuild" (id, event_id, aggregate_type, aggregate_id, event_type, payload, headers,
    status, retry_count, created_at, processed_at, available_at, expires_at, locked_until, lock_token, last_error,
    aggregate_seq)
SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers,
    status, retry_count, created_at, processed_at, available_at, expires_at, locked_until, lock_token, last_error,
    CASE WHEN status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED') THEN
        row_number() OVER (PARTITION BY aggregate_type, aggregate_id,
            status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED') ORDER BY id)
    END
FROM "{{.Outbox}}" ORDER BY id;

-- The AUTOINCREMENT counter survives the rebuild: ids of purged rows are
-- never handed out again.
INSERT INTO sqlite_sequence (name, seq)
SELECT '{{.Outbox}}_rebuild', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = '{{.Outbox}}_rebuild');
UPDATE sqlite_sequence SET seq = max(seq, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = '{{.Outbox}}'), 0))
WHERE name = '{{.Outbox}}_rebuild';

DROP TABLE "{{.Outbox}}";
ALTER TABLE "{{.Outbox}}_rebuild" RENAME TO "{{.Outbox}}";

-- The indexes of 00001, which went with the old table.
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_pending_idx"
    ON "{{.Outbox}}" (available_at, id) WHERE status = 'PENDING';
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_aggregate_idx"
    ON "{{.Outbox}}" (aggregate_type, aggregate_id, id)
    WHERE status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED');
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_failed_idx"
    ON "{{.Outbox}}" (aggregate_type, aggregate_id, id) WHERE status = 'FAILED';
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_blocked_idx"
    ON "{{.Outbox}}" (id) WHERE status = 'BLOCKED';
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_lease_idx"
    ON "{{.Outbox}}" (locked_until) WHERE status = 'PROCESSING';
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_expiry_idx"
    ON "{{.Outbox}}" (expires_at) WHERE status IN ('PENDING', 'BLOCKED') AND expires_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_aggregates" (
    aggregate_type TEXT    NOT NULL,
    aggregate_id   TEXT    NOT NULL,
    last_seq       INTEGER NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
) WITHOUT ROWID;

INSERT INTO "{{.Outbox}}_aggregates" (aggregate_type, aggregate_id, last_seq)
SELECT aggregate_type, aggregate_id, max(aggregate_seq) FROM "{{.Outbox}}"
WHERE aggregate_seq IS NOT NULL
GROUP BY aggregate_type, aggregate_id;

-- +goose StatementBegin
CREATE TRIGGER IF NOT EXISTS "{{.Outbox}}_after_insert" AFTER INSERT ON "{{.Outbox}}" FOR EACH ROW
BEGIN
    INSERT INTO "{{.Outbox}}_aggregates" (aggregate_type, aggregate_id, last_seq)
    VALUES (NEW.aggregate_type, NEW.aggregate_id, 1)
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = last_seq + 1;
    UPDATE "{{.Outbox}}" SET aggregate_seq = (SELECT last_seq FROM "{{.Outbox}}_aggregates"
        WHERE aggregate_type = NEW.aggregate_type AND aggregate_id = NEW.aggregate_id)
    WHERE id = NEW.id;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER IF EXISTS "{{.Outbox}}_after_insert";
DROP TABLE IF EXISTS "{{.Outbox}}_aggregates";
ALTER TABLE "{{.Outbox}}" DROP COLUMN aggregate_seq;
