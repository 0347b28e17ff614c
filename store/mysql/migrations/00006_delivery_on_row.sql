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
-- The columns are nullable without a default, in the types of the
-- attempts table's columns: MySQL 8 and MariaDB add them in place without
-- rewriting a row, existing PROCESSED rows keep their attempt rows, and a
-- table adopted by "outbox migrate --adopt" upgrades the same way. The
-- overview's throughput graph counts the deliveries of the last minutes by
-- delivered_finished_at, through its own index.
--
-- MySQL commits each DDL statement by itself and MySQL 8 before 8.0.29 has
-- no ADD COLUMN IF NOT EXISTS, so each step reads information_schema
-- first and adds only what is missing: a migration interrupted half-way is
-- completed by running it again. goose runs the statements of this file on
-- one connection, so the session variable holds.

-- +goose NO TRANSACTION
-- +goose Up
SET @outbox_add = CONCAT_WS(', ',
    IF(EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = DATABASE()
               AND table_name = '{{.Outbox}}' AND column_name = 'delivered_relay_id'),
       NULL, 'ADD COLUMN delivered_relay_id VARCHAR(200) NULL'),
    IF(EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = DATABASE()
               AND table_name = '{{.Outbox}}' AND column_name = 'delivered_attempt'),
       NULL, 'ADD COLUMN delivered_attempt INT NULL'),
    IF(EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = DATABASE()
               AND table_name = '{{.Outbox}}' AND column_name = 'delivered_started_at'),
       NULL, 'ADD COLUMN delivered_started_at DATETIME(6) NULL'),
    IF(EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = DATABASE()
               AND table_name = '{{.Outbox}}' AND column_name = 'delivered_finished_at'),
       NULL, 'ADD COLUMN delivered_finished_at DATETIME(6) NULL'),
    IF(EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = DATABASE()
               AND table_name = '{{.Outbox}}' AND column_name = 'delivered_trace_id'),
       NULL, 'ADD COLUMN delivered_trace_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL'),
    IF(EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = DATABASE()
               AND table_name = '{{.Outbox}}' AND column_name = 'delivered_token'),
       NULL, 'ADD COLUMN delivered_token CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL'));
SET @outbox_ddl = IF(@outbox_add = '', 'DO 0', CONCAT('ALTER TABLE `{{.Outbox}}` ', @outbox_add));
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

SET @outbox_ddl = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE `{{.Outbox}}` ADD INDEX `{{.Outbox}}_delivered_idx` (delivered_finished_at)',
    'DO 0')
    FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND index_name = '{{.Outbox}}_delivered_idx');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

-- +goose Down
-- The deliveries recorded on rows go back to the attempts table first
-- (INSERT IGNORE: a step run again writes nothing twice).
SET @outbox_ddl = (SELECT IF(COUNT(*) = 1,
    'INSERT IGNORE INTO `{{.Attempts}}` (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, trace_id)
     SELECT event_id, COALESCE(delivered_token, UUID()), ''DELIVERED'', id, COALESCE(delivered_attempt, 0), delivered_relay_id,
         COALESCE(delivered_started_at, delivered_finished_at, processed_at), COALESCE(delivered_finished_at, processed_at), delivered_trace_id
     FROM `{{.Outbox}}` WHERE delivered_relay_id IS NOT NULL',
    'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND column_name = 'delivered_relay_id');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

SET @outbox_ddl = (SELECT IF(COUNT(*) = 1, 'ALTER TABLE `{{.Outbox}}` DROP INDEX `{{.Outbox}}_delivered_idx`', 'DO 0')
    FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND index_name = '{{.Outbox}}_delivered_idx');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

SET @outbox_ddl = (SELECT COALESCE(CONCAT('ALTER TABLE `{{.Outbox}}` ', GROUP_CONCAT(CONCAT('DROP COLUMN ', k.column_name) SEPARATOR ', ')), 'DO 0')
    FROM information_schema.columns k
    WHERE k.table_schema = DATABASE() AND k.table_name = '{{.Outbox}}'
      AND k.column_name IN ('delivered_relay_id', 'delivered_attempt', 'delivered_started_at',
                            'delivered_finished_at', 'delivered_trace_id', 'delivered_token'));
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;
