-- A PROCESSED row enters no secondary index but the event_id key: the
-- index of every aggregate's events (00005) becomes partial, on the rare
-- final statuses. The unfinished ones (PENDING, PROCESSING, BLOCKED,
-- FAILED) are in the aggregate index of 00001 already, which the claim
-- reads. A status change always writes a new row version into every index
-- whose predicate the new version matches, so an index that PROCESSED rows
-- stay out of saves one index entry per delivered event, and one per
-- claimed event. The admin list of an aggregate's events in any status
-- then reads the unfinished and final-status indexes and, for PROCESSED
-- rows, the primary key newest first.

-- +goose Up
SET LOCAL lock_timeout = '10s';

DROP INDEX IF EXISTS "{{.Outbox}}_aggregate_all_idx";
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_aggregate_final_idx" ON "{{.Outbox}}" (aggregate_type, aggregate_id, id)
    WHERE status IN ('EXPIRED', 'SKIPPED');
-- The overview's throughput graph counts the last minutes' deliveries by
-- delivered_finished_at (migration 7). A BRIN index keeps one summary per
-- range of pages and writes it only when a value widens the range, so a
-- delivery almost never writes to it; rows are delivered roughly in the
-- order they were written, so the recent deliveries sit in few ranges.
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_delivered_brin" ON "{{.Outbox}}" USING brin (delivered_finished_at);

-- +goose Down
SET LOCAL lock_timeout = '10s';
DROP INDEX IF EXISTS "{{.Outbox}}_delivered_brin";
DROP INDEX IF EXISTS "{{.Outbox}}_aggregate_final_idx";
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_aggregate_all_idx" ON "{{.Outbox}}" (aggregate_type, aggregate_id, id);
