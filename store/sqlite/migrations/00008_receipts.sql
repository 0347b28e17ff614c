-- Delivery receipts, as on PostgreSQL (its migration 00012): what the
-- destination answered to an attempt, the compact JSON of a sink.Receipt.
-- An attempt row keeps the receipt of its attempt; a delivery recorded on
-- the event row keeps it in delivered_receipt.
--
-- The columns are nullable without a default: SQLite adds them without
-- rewriting a row, and a batch whose sink records no receipt writes NULL.
--
-- goose runs this file in a transaction: it must not contain PRAGMAs.

-- +goose Up
ALTER TABLE "{{.Outbox}}" ADD COLUMN delivered_receipt TEXT;
ALTER TABLE "{{.Attempts}}" ADD COLUMN receipt TEXT;

-- +goose Down
ALTER TABLE "{{.Attempts}}" DROP COLUMN receipt;
ALTER TABLE "{{.Outbox}}" DROP COLUMN delivered_receipt;
