-- Lanes, as on PostgreSQL (its migration 00010) and MySQL/MariaDB: every
-- aggregate belongs to one of 64 lanes (its row in <outbox>_aggregates
-- keeps it, drawn at random when the aggregate's first event is written,
-- since SQLite has no hash function in SQL), and each event carries its
-- aggregate's lane. Relays lease lanes (<outbox>_lanes: owner, token,
-- lease end in Unix milliseconds of the database clock), a fair share each
-- among the live relays (<outbox>_members). A relay reads its lanes' due
-- events without writing them; a batch in flight is one row of
-- <outbox>_claims (its token, the lanes it was claimed under with their
-- lease tokens, and its row ids, JSON arrays): PROCESSING is that, and no
-- event row is written when it is claimed. Completing a batch checks, in
-- its write transaction, that the lanes are still held under the claim's
-- tokens: that is the fence. SQLite runs one writer at a time, so the
-- claim reads by status, and next_id (PostgreSQL's lane cursor) stays 0.
--
-- The migration keeps every row and its state: unfinished rows get their
-- aggregate's lane, and a row PROCESSING under a lease of the previous
-- schema keeps it until the sweeper returns it when the lease ends.
--
-- goose runs this file in a transaction: it must not contain PRAGMAs.

-- +goose Up
ALTER TABLE "{{.Outbox}}" ADD COLUMN lane INTEGER;
ALTER TABLE "{{.Outbox}}_aggregates" ADD COLUMN lane INTEGER;

UPDATE "{{.Outbox}}_aggregates" SET lane = abs(random() % 64) WHERE lane IS NULL;
UPDATE "{{.Outbox}}" SET lane = (SELECT a.lane FROM "{{.Outbox}}_aggregates" a
    WHERE a.aggregate_type = "{{.Outbox}}".aggregate_type AND a.aggregate_id = "{{.Outbox}}".aggregate_id)
WHERE status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED');

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_lanes" (
    lane           INTEGER PRIMARY KEY,
    owner          TEXT,
    token          INTEGER,
    lease_until_ms INTEGER NOT NULL DEFAULT 0,
    next_id        INTEGER NOT NULL DEFAULT 0
);
WITH RECURSIVE g(lane) AS (SELECT 0 UNION ALL SELECT lane + 1 FROM g WHERE lane < 63)
INSERT INTO "{{.Outbox}}_lanes" (lane) SELECT lane FROM g WHERE true
ON CONFLICT DO NOTHING;

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_members" (
    relay_id TEXT    PRIMARY KEY,
    seen_ms  INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_claims" (
    token       TEXT    PRIMARY KEY,
    relay_id    TEXT    NOT NULL,
    lanes       TEXT    NOT NULL CHECK (json_valid(lanes)),
    lane_tokens TEXT    NOT NULL CHECK (json_valid(lane_tokens)),
    ids         TEXT    NOT NULL CHECK (json_valid(ids)),
    created_ms  INTEGER NOT NULL
);

-- The insert trigger of migration 2, which also gives the row its
-- aggregate's lane.
DROP TRIGGER IF EXISTS "{{.Outbox}}_after_insert";
-- +goose StatementBegin
CREATE TRIGGER "{{.Outbox}}_after_insert" AFTER INSERT ON "{{.Outbox}}" FOR EACH ROW
BEGIN
    INSERT INTO "{{.Outbox}}_aggregates" (aggregate_type, aggregate_id, last_seq, lane)
    VALUES (NEW.aggregate_type, NEW.aggregate_id, 1, abs(random() % 64))
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = last_seq + 1;
    UPDATE "{{.Outbox}}" SET (aggregate_seq, lane) = (SELECT last_seq, lane FROM "{{.Outbox}}_aggregates"
        WHERE aggregate_type = NEW.aggregate_type AND aggregate_id = NEW.aggregate_id)
    WHERE id = NEW.id;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER IF EXISTS "{{.Outbox}}_after_insert";
-- +goose StatementBegin
CREATE TRIGGER "{{.Outbox}}_after_insert" AFTER INSERT ON "{{.Outbox}}" FOR EACH ROW
BEGIN
    INSERT INTO "{{.Outbox}}_aggregates" (aggregate_type, aggregate_id, last_seq)
    VALUES (NEW.aggregate_type, NEW.aggregate_id, 1)
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = last_seq + 1;
    UPDATE "{{.Outbox}}" SET aggregate_seq = (SELECT last_seq FROM "{{.Outbox}}_aggregates"
        WHERE aggregate_type = NEW.aggregate_type AND aggregate_id = NEW.aggregate_id)
    WHERE id = NEW.id;
END;
-- +goose StatementEnd
DROP TABLE IF EXISTS "{{.Outbox}}_claims";
DROP TABLE IF EXISTS "{{.Outbox}}_members";
DROP TABLE IF EXISTS "{{.Outbox}}_lanes";
ALTER TABLE "{{.Outbox}}_aggregates" DROP COLUMN lane;
ALTER TABLE "{{.Outbox}}" DROP COLUMN lane;
