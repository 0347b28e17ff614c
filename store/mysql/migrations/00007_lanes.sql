-- Lanes, as on PostgreSQL (its migration 00010) and SQLite (00007): every
-- aggregate belongs to one of 64 lanes, the first byte of
-- MD5(aggregate_type ':' aggregate_id), the text in utf8mb4, modulo 64
-- (the lane PostgreSQL computes for the same aggregate), and each event
-- carries its aggregate's lane. Relays lease lanes (<outbox>_lanes: owner,
-- token, lease end in Unix milliseconds of the database clock), a fair
-- share each among the live relays (<outbox>_members). A relay reads its
-- lanes' due events without writing them; a batch in flight is one row of
-- <outbox>_claims (its token, the lanes it was claimed under with their
-- lease tokens, and its row ids, JSON arrays): PROCESSING is that, and no
-- event row is written when it is claimed. Completing a batch checks, in
-- its write transaction and under a share lock on the lane rows, that the
-- lanes are still held under the claim's tokens: that is the fence.
-- MySQL reads by status, so next_id (PostgreSQL's lane cursor) stays 0.
--
--   * The outbox table's lane is set by a BEFORE INSERT trigger of its own
--     (the producer contract's trigger of migration 2 is left as it is),
--     for every producer, Enqueue or plain SQL. The aggregates table's
--     lane is a virtual column of the same expression: it costs no write.
--   * The unfinished rows get their lane here; a finished row keeps NULL
--     (an operator's requeue gives it its lane). A row PROCESSING under a
--     lease of the previous schema keeps it until the sweeper returns it
--     when the lease ends.
--   * <outbox>_lane_due_idx reads one lane's due PENDING rows in
--     (available_at, id) order.
--
-- The lane expression has no quote, so that it can sit inside the
-- prepared statements' text: 0x3A is ':'. MySQL commits each DDL statement
-- by itself and MySQL 8 before 8.0.29 has no ADD COLUMN IF NOT EXISTS, so
-- each step reads information_schema first and does only what is missing:
-- a migration interrupted half-way is completed by running it again.
-- goose runs the statements of this file on one connection, so the
-- session variable holds. The down migration restores version 6: claims
-- in flight vanish with their table, and their rows are PENDING as they
-- were.

-- +goose NO TRANSACTION
-- +goose Up
SET @outbox_ddl = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE `{{.Outbox}}` ADD COLUMN lane SMALLINT NULL', 'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND column_name = 'lane');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

SET @outbox_ddl = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE `{{.Outbox}}_aggregates` ADD COLUMN lane SMALLINT GENERATED ALWAYS AS ({{.LaneOf ""}}) VIRTUAL', 'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}_aggregates' AND column_name = 'lane');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

-- New rows get their lane before the existing ones are numbered, so that
-- no row written meanwhile is left without one.
DROP TRIGGER IF EXISTS `{{.Outbox}}_lane`;
CREATE TRIGGER `{{.Outbox}}_lane` BEFORE INSERT ON `{{.Outbox}}` FOR EACH ROW
SET NEW.lane = {{.LaneOf "NEW."}};

UPDATE `{{.Outbox}}` SET lane = {{.LaneOf ""}}
WHERE lane IS NULL AND status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED');

SET @outbox_ddl = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE `{{.Outbox}}` ADD INDEX `{{.Outbox}}_lane_due_idx` (status, lane, available_at, id)',
    'DO 0')
    FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND index_name = '{{.Outbox}}_lane_due_idx');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

CREATE TABLE IF NOT EXISTS `{{.Outbox}}_lanes` (
    lane           SMALLINT     NOT NULL,
    owner          VARCHAR(200) NULL,
    token          BIGINT       NULL,
    lease_until_ms BIGINT       NOT NULL DEFAULT 0,
    next_id        BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (lane)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT IGNORE INTO `{{.Outbox}}_lanes` (lane)
SELECT a.n * 8 + b.n FROM
    (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
     UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7) a
CROSS JOIN
    (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
     UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7) b;

-- The members' heartbeats; the index lets the pruning of long-gone members
-- read only those.
CREATE TABLE IF NOT EXISTS `{{.Outbox}}_members` (
    relay_id VARCHAR(200) NOT NULL,
    seen_ms  BIGINT       NOT NULL,
    PRIMARY KEY (relay_id),
    INDEX `{{.Outbox}}_members_seen_idx` (seen_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The batches in flight: lanes, lane_tokens and ids are JSON arrays.
CREATE TABLE IF NOT EXISTS `{{.Outbox}}_claims` (
    token       CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    relay_id    VARCHAR(200) NOT NULL,
    lanes       JSON         NOT NULL,
    lane_tokens JSON         NOT NULL,
    ids         JSON         NOT NULL,
    created_ms  BIGINT       NOT NULL,
    PRIMARY KEY (token)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE IF EXISTS `{{.Outbox}}_claims`;
DROP TABLE IF EXISTS `{{.Outbox}}_members`;
DROP TABLE IF EXISTS `{{.Outbox}}_lanes`;
DROP TRIGGER IF EXISTS `{{.Outbox}}_lane`;

SET @outbox_ddl = (SELECT IF(COUNT(*) > 0, 'ALTER TABLE `{{.Outbox}}` DROP INDEX `{{.Outbox}}_lane_due_idx`', 'DO 0')
    FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND index_name = '{{.Outbox}}_lane_due_idx');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

SET @outbox_ddl = (SELECT IF(COUNT(*) = 1, 'ALTER TABLE `{{.Outbox}}_aggregates` DROP COLUMN lane', 'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}_aggregates' AND column_name = 'lane');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

SET @outbox_ddl = (SELECT IF(COUNT(*) = 1, 'ALTER TABLE `{{.Outbox}}` DROP COLUMN lane', 'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND column_name = 'lane');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;
