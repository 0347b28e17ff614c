-- Deadlines as a feature: the compensating event of an event that ends
-- EXPIRED and the trace id of each attempt. The earliest-deadline-first
-- part of the claim reads the expiry index of 00001 (waiting_expires_at).
--
-- MySQL commits each DDL statement by itself and MySQL 8 has no ADD COLUMN
-- IF NOT EXISTS, so each step checks information_schema first: a migration
-- interrupted half-way is completed by running it again. goose runs the
-- statements of this file on one connection, so the session variable holds.

-- +goose NO TRANSACTION
-- +goose Up
-- on_expired: {"event_type": "...", "payload": {...}}, enqueued on the same
-- aggregate in the transaction that moves the event to EXPIRED.
SET @outbox_ddl = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE `{{.Outbox}}` ADD COLUMN on_expired LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL CHECK (on_expired IS NULL OR JSON_VALID(on_expired))',
    'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND column_name = 'on_expired');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

-- The W3C trace id (32 hex digits) of the attempt's publish span, or of the
-- producer's traceparent when the relay traces nothing.
SET @outbox_ddl = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE `{{.Attempts}}` ADD COLUMN trace_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL',
    'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Attempts}}' AND column_name = 'trace_id');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

-- +goose Down
SET @outbox_ddl = (SELECT IF(COUNT(*) = 1, 'ALTER TABLE `{{.Attempts}}` DROP COLUMN trace_id', 'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Attempts}}' AND column_name = 'trace_id');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

SET @outbox_ddl = (SELECT IF(COUNT(*) = 1, 'ALTER TABLE `{{.Outbox}}` DROP COLUMN on_expired', 'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND column_name = 'on_expired');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;
