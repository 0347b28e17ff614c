-- Deadlines as a feature: the compensating event of an event that ends
-- EXPIRED and the trace id of each attempt. The earliest-deadline-first
-- part of the claim reads the expiry index of 00001.

-- +goose Up
SET LOCAL lock_timeout = '10s';

-- on_expired: {"event_type": "...", "payload": {...}}, enqueued on the same
-- aggregate in the transaction that moves the event to EXPIRED.
ALTER TABLE "{{.Outbox}}" ADD COLUMN IF NOT EXISTS on_expired JSON;
-- The W3C trace id (32 hex digits) of the attempt's publish span, or of the
-- producer's traceparent when the relay traces nothing.
ALTER TABLE "{{.Attempts}}" ADD COLUMN IF NOT EXISTS trace_id VARCHAR(32);

-- +goose Down
SET LOCAL lock_timeout = '10s';
ALTER TABLE "{{.Attempts}}" DROP COLUMN IF EXISTS trace_id;
ALTER TABLE "{{.Outbox}}" DROP COLUMN IF EXISTS on_expired;
