-- The producer contract in the database, for producers in any language
-- (docs/PRODUCERS.md). A plain INSERT of aggregate_type, aggregate_id,
-- event_type and payload is enough; a BEFORE INSERT trigger then
--
--   * fills event_id with a UUIDv7 (48 bits of Unix milliseconds from
--     clock_timestamp(), the rest from gen_random_uuid()) when it is NULL;
--     headers, created_at and available_at keep their column defaults
--     ('{}', now());
--   * upserts the aggregate's row in <outbox>_aggregates: the row lock
--     serializes the producers of one aggregate until their transactions
--     end, and last_seq + 1 is the event's aggregate_seq (1, 2, 3 ... per
--     aggregate, without gaps, since a rolled-back insert rolls back the
--     upsert too);
--   * only then takes the row id from the table's sequence. Column
--     defaults are evaluated before BEFORE triggers run, so the id the
--     default drew was taken before the lock: replacing it is what makes
--     id order the commit order within an aggregate, and the relay
--     delivers an aggregate's events in id order.
--
-- Existing unfinished rows (PENDING, PROCESSING, BLOCKED, FAILED) are
-- numbered in id order per aggregate and the aggregates table starts from
-- their numbers. The migration runs in one transaction under the ALTER
-- TABLE's lock, so no producer writes in between.

-- +goose Up
SET LOCAL lock_timeout = '10s';

ALTER TABLE "{{.Outbox}}" ADD COLUMN IF NOT EXISTS aggregate_seq BIGINT;

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_aggregates" (
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    last_seq       BIGINT       NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);

UPDATE "{{.Outbox}}" o SET aggregate_seq = n.seq
FROM (SELECT id, row_number() OVER (PARTITION BY aggregate_type, aggregate_id ORDER BY id) AS seq
      FROM "{{.Outbox}}"
      WHERE status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED')) n
WHERE o.id = n.id AND o.aggregate_seq IS NULL;

INSERT INTO "{{.Outbox}}_aggregates" (aggregate_type, aggregate_id, last_seq)
SELECT aggregate_type, aggregate_id, max(aggregate_seq) FROM "{{.Outbox}}"
WHERE aggregate_seq IS NOT NULL
GROUP BY aggregate_type, aggregate_id
ON CONFLICT (aggregate_type, aggregate_id) DO NOTHING;

-- The function names the id sequence of this table (whatever its name)
-- and the aggregates table literally, so that its plan is prepared once.
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

CREATE OR REPLACE TRIGGER "{{.Outbox}}_before_insert"
    BEFORE INSERT ON "{{.Outbox}}"
    FOR EACH ROW EXECUTE FUNCTION "{{.Outbox}}_before_insert"();

-- +goose Down
SET LOCAL lock_timeout = '10s';
DROP TRIGGER IF EXISTS "{{.Outbox}}_before_insert" ON "{{.Outbox}}";
DROP FUNCTION IF EXISTS "{{.Outbox}}_before_insert"();
DROP TABLE IF EXISTS "{{.Outbox}}_aggregates";
ALTER TABLE "{{.Outbox}}" DROP COLUMN IF EXISTS aggregate_seq;
