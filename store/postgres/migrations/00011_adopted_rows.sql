-- An adopted table (outbox migrate --adopt; its record table
-- <outbox>_adoption exists) gets what a table that outbox created has:
--
--   * event_id without a column default. The insert trigger of migration
--     00002 fills a NULL event_id with a UUIDv7, but column defaults are
--     applied before BEFORE triggers run: the gen_random_uuid() default
--     that adoption gave the column (so that the team's INSERT worked
--     before the trigger existed) gave every plain INSERT a UUIDv4. A
--     table that outbox created has no default there and is not touched.
--   * A dead letter for each FAILED row that has none: on an adopted table
--     these are the rows the previous scheduler had given up on. The
--     reason says so, with the row's last error when the team's table had
--     one; the row keeps its retry_count, gets the reason as its
--     last_error when it had none (what `outbox events list` shows), and
--     an ADOPTED row in its audit trail. A table that outbox created is
--     not touched: its FAILED rows got their dead letters when they failed.
--
-- Every step skips what is already done, so the migration can run again.

-- +goose Up
SET LOCAL lock_timeout = '10s';

-- +goose StatementBegin
DO $migrate$
BEGIN
    IF to_regclass('"{{.Outbox}}_adoption"') IS NULL THEN
        RETURN;
    END IF;
    -- Only when there is a default to drop: ALTER TABLE takes the table's
    -- ACCESS EXCLUSIVE lock, which a run again need not wait for.
    IF EXISTS (SELECT 1 FROM pg_attrdef d
               JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
               WHERE d.adrelid = to_regclass('"{{.Outbox}}"') AND a.attname = 'event_id') THEN
        ALTER TABLE "{{.Outbox}}" ALTER COLUMN event_id DROP DEFAULT;
    END IF;
    INSERT INTO "{{.DeadLetters}}" (outbox_id, event_id, aggregate_type, aggregate_id, event_type, payload, headers,
        retry_count, reason, failed_at)
    SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload::text::json, o.headers::text::json,
        COALESCE(o.retry_count, 0),
        'adopted as FAILED: the previous scheduler had failed it before outbox adopted the table'
            || COALESCE('; its last error: ' || left(o.last_error::text, 2000), ''),
        COALESCE(o.processed_at, now())
    FROM "{{.Outbox}}" o
    WHERE o.status = 'FAILED'
      AND NOT EXISTS (SELECT 1 FROM "{{.DeadLetters}}" d WHERE d.event_id = o.event_id);

    INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, error)
    SELECT o.event_id, gen_random_uuid(), 'ADOPTED', o.id, COALESCE(o.retry_count, 0), 'outbox migrate --adopt', now(), now(),
        'FAILED under the previous scheduler when outbox adopted the table: kept FAILED, with a dead letter'
    FROM "{{.Outbox}}" o
    WHERE o.status = 'FAILED'
      AND NOT EXISTS (SELECT 1 FROM "{{.Attempts}}" a WHERE a.event_id = o.event_id AND a.outcome = 'ADOPTED');

    UPDATE "{{.Outbox}}" o SET last_error = d.reason
    FROM "{{.DeadLetters}}" d
    WHERE o.status = 'FAILED' AND o.last_error IS NULL AND d.event_id = o.event_id AND d.requeued_at IS NULL;
END
$migrate$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL lock_timeout = '10s';
-- The default that keeps the team's INSERT working once migration 00002's
-- trigger is gone again; the dead letters stay (they describe the rows).
-- +goose StatementBegin
DO $migrate$
BEGIN
    IF to_regclass('"{{.Outbox}}_adoption"') IS NOT NULL THEN
        ALTER TABLE "{{.Outbox}}" ALTER COLUMN event_id SET DEFAULT gen_random_uuid();
    END IF;
END
$migrate$;
-- +goose StatementEnd
