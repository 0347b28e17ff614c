-- Deadlines as a feature: the compensating event of an event that ends
-- EXPIRED and the trace id of each attempt. The earliest-deadline-first
-- part of the claim reads the expiry index of 00001.
--
-- goose runs this file in a transaction: it must not contain PRAGMAs.

-- +goose Up
-- on_expired: {"event_type": "...", "payload": {...}}, enqueued on the same
-- aggregate in the transaction that moves the event to EXPIRED.
ALTER TABLE "{{.Outbox}}" ADD COLUMN on_expired TEXT CHECK (on_expired IS NULL OR json_valid(on_expired));
-- The W3C trace id (32 hex digits) of the attempt's publish span, or of the
-- producer's traceparent when the relay traces nothing.
ALTER TABLE "{{.Attempts}}" ADD COLUMN trace_id TEXT;

-- +goose Down
ALTER TABLE "{{.Attempts}}" DROP COLUMN trace_id;
ALTER TABLE "{{.Outbox}}" DROP COLUMN on_expired;
