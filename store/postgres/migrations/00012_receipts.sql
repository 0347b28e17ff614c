-- Delivery receipts: what the destination answered to an attempt (the
-- HTTP status and digests of the response, the broker's acknowledgement),
-- as the compact JSON of a sink.Receipt. An attempt row keeps the receipt
-- of its attempt; a delivery recorded on the event row (in
-- <outbox>_deliveries since migration 00010) keeps it in
-- delivered_receipt. TEXT, not JSONB: the receipt is kept byte for byte
-- as the relay wrote it.
--
-- The columns are nullable without a default: adding them rewrites no
-- row, and a batch whose sink records no receipt writes NULL, as before.

-- +goose Up
SET LOCAL lock_timeout = '10s';
ALTER TABLE "{{.Outbox}}" ADD COLUMN IF NOT EXISTS delivered_receipt TEXT;
ALTER TABLE "{{.Attempts}}" ADD COLUMN IF NOT EXISTS receipt TEXT;

-- +goose Down
SET LOCAL lock_timeout = '10s';
ALTER TABLE "{{.Attempts}}" DROP COLUMN IF EXISTS receipt;
ALTER TABLE "{{.Outbox}}" DROP COLUMN IF EXISTS delivered_receipt;
