-- Lanes: one cheap write per delivered event.
--
-- Every aggregate belongs to one of 64 lanes (its row in <outbox>_aggregates
-- keeps it: the first byte of md5(aggregate_type || ':' || aggregate_id),
-- modulo 64), and each event carries its aggregate's lane. Relays lease
-- lanes (<outbox>_lanes: owner, token, lease end in Unix milliseconds of the
-- database clock; the token is random, new at each take, and fences the
-- lane's completions), a fair share each among the live relays
-- (<outbox>_members). A relay reads its lanes' due events without writing
-- them; a batch in flight is one row of <outbox>_claims (its token, the
-- lanes it was claimed under with their lease tokens, and its row ids):
-- PROCESSING is that, and no event row is written when it is claimed.
-- Completing a batch checks, under a share lock on the lane rows, that the
-- lanes are still held under the claim's tokens: that is the fence.
--
-- A delivered event changes only its status and processed_at, and no index
-- names either, so that PostgreSQL updates the row in place on its page
-- (a HOT update: no new index entry, a small WAL record). The attempt's
-- audit (relay, start and end, claim token) is one row per completed batch
-- in <outbox>_deliveries: its events are the PROCESSED rows of its lanes
-- whose processed_at is its completed_at (the completion's transaction
-- time; two relays never hold one lane), and the attempt number is the
-- event's retry_count + 1. Only a batch sent under trace ids lists its
-- events and their trace ids. Failed, retried, fenced and operator
-- attempts keep their rows in the attempts table.
--
-- So no index may name status. hold says how a relay finds an unfinished
-- event instead:
--   0  in its lane's id order, from the lane's cursor (next_id): every
--      event of hold 0 below it has finished. A delivery keeps hold 0.
--   1  by its due time: delayed, deadline-bearing, retried, given back or
--      requeued events (the due and deadline indexes).
--   2  BLOCKED, or FAILED (which holds its aggregate back).
-- The insert trigger sets lane and hold; a final status sets hold 0.
--
-- The migration keeps every row and its state. Unfinished rows get their
-- lane and hold; a row PROCESSING under a lease of the previous schema
-- keeps it, holds its aggregate back until the sweeper returns it when the
-- lease ends (the lease index), and is then claimed like any other. Each
-- lane's cursor starts at its first unfinished row of hold 0.

-- +goose Up
SET LOCAL lock_timeout = '10s';

ALTER TABLE "{{.Outbox}}"
    ADD COLUMN IF NOT EXISTS lane SMALLINT,
    ADD COLUMN IF NOT EXISTS hold SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE "{{.Outbox}}_aggregates" ADD COLUMN IF NOT EXISTS lane SMALLINT;

UPDATE "{{.Outbox}}_aggregates"
SET lane = get_byte(decode(md5(aggregate_type || ':' || aggregate_id), 'hex'), 0) % 64
WHERE lane IS NULL;

UPDATE "{{.Outbox}}" o SET lane = a.lane,
    hold = CASE WHEN o.status IN ('BLOCKED', 'FAILED') THEN 2
                WHEN o.expires_at IS NOT NULL OR o.available_at > now() THEN 1
                ELSE 0 END
FROM "{{.Outbox}}_aggregates" a
WHERE a.aggregate_type = o.aggregate_type AND a.aggregate_id = o.aggregate_id
  AND o.status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED');

-- A PROCESSING row is found by its lease (the lease index): one without a
-- token or an end gets them, so that the sweeper returns it.
UPDATE "{{.Outbox}}" SET lock_token = COALESCE(lock_token, gen_random_uuid()), locked_until = COALESCE(locked_until, now())
WHERE status = 'PROCESSING' AND (lock_token IS NULL OR locked_until IS NULL);

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_lanes" (
    lane           SMALLINT     PRIMARY KEY,
    owner          VARCHAR(200),
    token          BIGINT,
    lease_until_ms BIGINT       NOT NULL DEFAULT 0,
    next_id        BIGINT       NOT NULL DEFAULT 0
);
INSERT INTO "{{.Outbox}}_lanes" (lane, next_id)
SELECT g, COALESCE(
    (SELECT min(o.id) FROM "{{.Outbox}}" o WHERE o.lane = g AND o.hold = 0 AND o.status IN ('PENDING', 'PROCESSING')),
    (SELECT COALESCE(max(o.id), 0) + 1 FROM "{{.Outbox}}" o))
FROM generate_series(0, 63) g
ON CONFLICT DO NOTHING;

-- The cursors assume ids only grow. TRUNCATE (with RESTART IDENTITY, the
-- ids start again below them) ends every lease and claim and resets the
-- cursors: the relays' completions in flight are fenced, and they take
-- the lanes again from the start.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION "{{.Outbox}}_after_truncate"() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    UPDATE "{{.Outbox}}_lanes" SET owner = NULL, token = NULL, lease_until_ms = 0, next_id = 0;
    DELETE FROM "{{.Outbox}}_claims";
    RETURN NULL;
END
$body$;
-- +goose StatementEnd

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_members" (
    relay_id VARCHAR(200) PRIMARY KEY,
    seen_ms  BIGINT       NOT NULL
);

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_claims" (
    token       UUID         PRIMARY KEY,
    relay_id    VARCHAR(200) NOT NULL,
    lanes       SMALLINT[]   NOT NULL,
    lane_tokens BIGINT[]     NOT NULL,
    ids         BIGINT[]     NOT NULL,
    created_ms  BIGINT       NOT NULL
);
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_claims_relay_idx" ON "{{.Outbox}}_claims" (relay_id);
DROP TRIGGER IF EXISTS "{{.Outbox}}_after_truncate" ON "{{.Outbox}}";
CREATE TRIGGER "{{.Outbox}}_after_truncate" AFTER TRUNCATE ON "{{.Outbox}}"
    FOR EACH STATEMENT EXECUTE FUNCTION "{{.Outbox}}_after_truncate"();

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_deliveries" (
    id           BIGINT       GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    token        UUID         NOT NULL,
    relay_id     VARCHAR(200) NOT NULL,
    completed_at TIMESTAMPTZ  NOT NULL,
    started_at   TIMESTAMPTZ  NOT NULL,
    finished_at  TIMESTAMPTZ  NOT NULL,
    lanes        SMALLINT[]   NOT NULL,
    delivered    INT          NOT NULL,
    ids          BIGINT[],
    trace_ids    TEXT[]
);
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_deliveries_completed_idx" ON "{{.Outbox}}_deliveries" (completed_at);
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_deliveries_token_idx" ON "{{.Outbox}}_deliveries" (token);

DROP INDEX IF EXISTS "{{.Outbox}}_pending_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_aggregate_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_failed_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_blocked_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_lease_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_expiry_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_status_id_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_aggregate_final_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_delivered_brin";

-- A lane's events in id order, from its cursor.
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_lane_idx" ON "{{.Outbox}}" (lane, id);
-- An aggregate's events in id order (the admin's list of an aggregate).
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_aggregate_all_idx" ON "{{.Outbox}}" (aggregate_type, aggregate_id, id);
-- An aggregate's events of hold 1 and 2: what may hold it back.
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_held_idx" ON "{{.Outbox}}" (aggregate_type, aggregate_id, id) WHERE hold > 0;
-- Events of hold 1 by due time, and by deadline (earliest deadline first,
-- and the sweeper's expiry).
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_due_idx" ON "{{.Outbox}}" (available_at, id) WHERE hold = 1;
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_deadline_idx" ON "{{.Outbox}}" (expires_at, id) WHERE hold > 0 AND expires_at IS NOT NULL;
-- Rows claimed under the previous schema's leases, for the sweeper.
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_lease_idx" ON "{{.Outbox}}" (locked_until) WHERE lock_token IS NOT NULL;
-- Rows that failed once at least: the admin's lists of FAILED, EXPIRED and
-- SKIPPED events.
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_errored_idx" ON "{{.Outbox}}" (id) WHERE last_error IS NOT NULL;

-- The insert trigger of migration 2, which also sets lane and hold.
-- +goose StatementBegin
DO $migrate$
DECLARE
    seq text := pg_get_serial_sequence(quote_ident('{{.Outbox}}'), 'id');
BEGIN
    IF seq IS NULL THEN
        RAISE EXCEPTION 'table {{.Outbox}}: column id has no sequence (it must be an identity or serial column)';
    END IF;
    EXECUTE format($fn$
CREATE OR REPLACE FUNCTION %I() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    IF NEW.event_id IS NULL THEN
        NEW.event_id := encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
            PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
            FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid;
    END IF;
    IF NEW.headers IS NULL THEN
        NEW.headers := '{}';
    END IF;
    IF NEW.created_at IS NULL THEN
        NEW.created_at := now();
    END IF;
    IF NEW.available_at IS NULL THEN
        NEW.available_at := now();
    END IF;
    INSERT INTO %I AS a (aggregate_type, aggregate_id, last_seq, lane)
    VALUES (NEW.aggregate_type, NEW.aggregate_id, 1,
        get_byte(decode(md5(NEW.aggregate_type || ':' || NEW.aggregate_id), 'hex'), 0) %% 64)
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = a.last_seq + 1
    RETURNING a.last_seq, a.lane INTO NEW.aggregate_seq, NEW.lane;
    NEW.hold := CASE WHEN NEW.expires_at IS NOT NULL OR NEW.available_at > now() THEN 1 ELSE 0 END;
    NEW.id := nextval(%L::regclass);
    RETURN NEW;
END
$body$
$fn$, '{{.Outbox}}_before_insert', '{{.Outbox}}_aggregates', seq);
END
$migrate$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '10s';

-- Deliveries recorded per batch go back to the attempts table first.
INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, trace_id)
SELECT o.event_id, d.token, 'DELIVERED', o.id, o.retry_count + 1, d.relay_id, d.started_at, d.finished_at,
    NULLIF(d.trace_ids[array_position(d.ids, o.id)], '')
FROM "{{.Outbox}}_deliveries" d
JOIN "{{.Outbox}}" o ON o.processed_at = d.completed_at AND o.lane = ANY(d.lanes) AND o.status = 'PROCESSED'
    AND (d.ids IS NULL OR o.id = ANY(d.ids))
ON CONFLICT DO NOTHING;

-- +goose StatementBegin
DO $migrate$
DECLARE
    seq text := pg_get_serial_sequence(quote_ident('{{.Outbox}}'), 'id');
BEGIN
    EXECUTE format($fn$
CREATE OR REPLACE FUNCTION %I() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    IF NEW.event_id IS NULL THEN
        NEW.event_id := encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
            PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
            FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid;
    END IF;
    IF NEW.headers IS NULL THEN
        NEW.headers := '{}';
    END IF;
    IF NEW.created_at IS NULL THEN
        NEW.created_at := now();
    END IF;
    IF NEW.available_at IS NULL THEN
        NEW.available_at := now();
    END IF;
    INSERT INTO %I AS a (aggregate_type, aggregate_id, last_seq)
    VALUES (NEW.aggregate_type, NEW.aggregate_id, 1)
    ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = a.last_seq + 1
    RETURNING a.last_seq INTO NEW.aggregate_seq;
    NEW.id := nextval(%L::regclass);
    RETURN NEW;
END
$body$
$fn$, '{{.Outbox}}_before_insert', '{{.Outbox}}_aggregates', seq);
END
$migrate$;
-- +goose StatementEnd

DROP INDEX IF EXISTS "{{.Outbox}}_errored_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_lease_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_deadline_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_due_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_held_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_aggregate_all_idx";
DROP INDEX IF EXISTS "{{.Outbox}}_lane_idx";

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
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_status_id_idx" ON "{{.Outbox}}" (status, id)
    WHERE status IN ('FAILED', 'EXPIRED', 'SKIPPED');
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_aggregate_final_idx" ON "{{.Outbox}}" (aggregate_type, aggregate_id, id)
    WHERE status IN ('EXPIRED', 'SKIPPED');
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_delivered_brin" ON "{{.Outbox}}" USING brin (delivered_finished_at);

DROP TRIGGER IF EXISTS "{{.Outbox}}_after_truncate" ON "{{.Outbox}}";
DROP FUNCTION IF EXISTS "{{.Outbox}}_after_truncate"();
DROP TABLE IF EXISTS "{{.Outbox}}_deliveries";
DROP TABLE IF EXISTS "{{.Outbox}}_claims";
DROP TABLE IF EXISTS "{{.Outbox}}_members";
DROP TABLE IF EXISTS "{{.Outbox}}_lanes";
ALTER TABLE "{{.Outbox}}_aggregates" DROP COLUMN IF EXISTS lane;
ALTER TABLE "{{.Outbox}}" DROP COLUMN IF EXISTS hold, DROP COLUMN IF EXISTS lane;
