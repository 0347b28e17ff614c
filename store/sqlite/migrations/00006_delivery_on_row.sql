-- The audit of a successful delivery lives on the event row, as on
-- PostgreSQL (its migration 00007): the relay that delivered it, the
-- attempt number, the relay's start and finish times, the trace id and
-- the token of the claim that delivered it. A DELIVERED outcome then
-- writes no row in the attempts table; the attempts table keeps every
-- other attempt (failed, retried, fenced, expired, a delivery whose
-- outcome carries an error text, operator actions), and the audit trail
-- of an event is the union of both (Store.Attempts). An operator action on
-- a delivered event first moves that delivery into the attempts table, so
-- a second delivery overwrites nothing.
--
-- The columns are nullable without a default: SQLite adds them without
-- rewriting a row, and existing PROCESSED rows keep their attempt rows.
-- Timestamps are UTC text as in 00001. The overview's throughput graph
-- counts the deliveries of the last minutes by delivered_finished_at,
-- through its own partial index.
--
-- goose runs this file in a transaction: it must not contain PRAGMAs.

-- +goose Up
ALTER TABLE "{{.Outbox}}" ADD COLUMN delivered_relay_id TEXT;
ALTER TABLE "{{.Outbox}}" ADD COLUMN delivered_attempt INTEGER;
ALTER TABLE "{{.Outbox}}" ADD COLUMN delivered_started_at TEXT;
ALTER TABLE "{{.Outbox}}" ADD COLUMN delivered_finished_at TEXT;
ALTER TABLE "{{.Outbox}}" ADD COLUMN delivered_trace_id TEXT;
ALTER TABLE "{{.Outbox}}" ADD COLUMN delivered_token TEXT;
-- Partial: an event enters it when delivered, not when enqueued (the
-- graph's "delivered_finished_at > ?" implies the index's condition).
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_delivered_idx" ON "{{.Outbox}}" (delivered_finished_at)
    WHERE delivered_finished_at IS NOT NULL;

-- +goose Down
-- The deliveries recorded on rows go back to the attempts table first.
INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, trace_id)
SELECT event_id, COALESCE(delivered_token, lower(hex(randomblob(16)))), 'DELIVERED', id, COALESCE(delivered_attempt, 0),
    delivered_relay_id, COALESCE(delivered_started_at, delivered_finished_at, processed_at),
    COALESCE(delivered_finished_at, processed_at), delivered_trace_id
FROM "{{.Outbox}}" WHERE delivered_relay_id IS NOT NULL
ON CONFLICT DO NOTHING;
DROP INDEX IF EXISTS "{{.Outbox}}_delivered_idx";
ALTER TABLE "{{.Outbox}}" DROP COLUMN delivered_token;
ALTER TABLE "{{.Outbox}}" DROP COLUMN delivered_trace_id;
ALTER TABLE "{{.Outbox}}" DROP COLUMN delivered_finished_at;
ALTER TABLE "{{.Outbox}}" DROP COLUMN delivered_started_at;
ALTER TABLE "{{.Outbox}}" DROP COLUMN delivered_attempt;
ALTER TABLE "{{.Outbox}}" DROP COLUMN delivered_relay_id;
