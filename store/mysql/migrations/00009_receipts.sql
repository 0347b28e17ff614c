-- Delivery receipts, as on PostgreSQL (its migration 00012): what the
-- destination answered to an attempt, the compact JSON of a sink.Receipt.
-- An attempt row keeps the receipt of its attempt; a delivery recorded on
-- the event row keeps it in delivered_receipt. TEXT (not JSON, which
-- MySQL would store normalised): the receipt is kept byte for byte.
--
-- Nullable columns without a default, added at the end of each table
-- (MariaDB and MySQL 8 add them without copying the table); a batch whose
-- sink records no receipt writes NULL. Each column is added only if it is
-- missing, so the migration can run again.

-- +goose NO TRANSACTION
-- +goose Up
SET @outbox_ddl = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE `{{.Outbox}}` ADD COLUMN delivered_receipt TEXT NULL',
    'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND column_name = 'delivered_receipt');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

SET @outbox_ddl = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE `{{.Attempts}}` ADD COLUMN receipt TEXT NULL',
    'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Attempts}}' AND column_name = 'receipt');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

-- +goose Down
SET @outbox_ddl = (SELECT IF(COUNT(*) = 1,
    'ALTER TABLE `{{.Attempts}}` DROP COLUMN receipt',
    'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Attempts}}' AND column_name = 'receipt');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

SET @outbox_ddl = (SELECT IF(COUNT(*) = 1,
    'ALTER TABLE `{{.Outbox}}` DROP COLUMN delivered_receipt',
    'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND column_name = 'delivered_receipt');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;
