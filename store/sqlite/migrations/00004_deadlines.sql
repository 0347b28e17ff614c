-- Deadlines as a feature: the compensating event of an event that ends
-- EXPIRED, the trace id of each attempt, and the index the earliest-deadline-
-- first part of the claim reads.
--
-- goose runs this file in a transaction: it must not contain PRAGMAs.

-- +goose Up
-- on_expired: {"event_type": "...", "payload": {...}}, enqueued on the same
-- aggregate in the transaction that moves the event to EXPIRED.
ALTER TABLE "{{.Outbox}}" ADD COLUMN on_expired TEXT CHECK (on_expired IS NULL OR json_valid(on_expired));
-- The W3C trace id (32 hex digits) of the attempt's publish span, or of the
-- producer's traceparent when the relay traces nothing.
ALTER TABLE "{{.Attempts}}" ADD COLUMN trace_id TEXT;
-- The claim takes part of each batch by nearest deadline among due PENDING rows.
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_deadline_idx"
    ON "{{.Outbox}}" (expires_at, id) WHERE status = 'PENDING' AND expires_at IS NOT NULL;

-- +goose Down
DROP INDEX IF EXISTS "{{.Outbox}}_deadline_idx";
ALTER TABLE "{{.Attempts}}" DROP COLUMN trace_id;
ALTER TABLE "{{.Outbox}}" DROP COLUMN on_expired;
