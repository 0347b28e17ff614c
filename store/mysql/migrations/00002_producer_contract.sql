-- The producer contract in the database, for producers in any language
-- (docs/PRODUCERS.md). A plain INSERT of aggregate_type, aggregate_id,
-- event_type and payload is enough; a BEFORE INSERT trigger then
--
--   * fills event_id with a UUIDv7 when it is NULL or empty (48 bits of
--     Unix milliseconds, the rest from MD5(UUID()): UUID() is unique on
--     the server, its hash spreads it), headers with '{}', created_at and
--     available_at with UTC_TIMESTAMP(6) when they are NULL;
--   * stores times in UTC whatever the session's time zone: a time the
--     producer writes (NOW(), or a value in its session's zone) is moved
--     by the session's offset from UTC. Enqueue writes UTC already and
--     says so by passing aggregate_seq = 0, which the trigger overwrites;
--   * upserts the aggregate's row in <outbox>_aggregates (INSERT ... ON
--     DUPLICATE KEY UPDATE): the row lock serializes the producers of one
--     aggregate until their transactions end, and last_seq is the event's
--     aggregate_seq (1, 2, 3 ... per aggregate, without gaps: a rolled-back
--     insert rolls back the upsert too).
--
-- InnoDB draws the AUTO_INCREMENT id when it writes the row, after the
-- BEFORE trigger, so an aggregate's ids follow its lock, which is commit
-- order. A multi-row INSERT under innodb_autoinc_lock_mode = 1 (MariaDB's
-- default) draws the ids of all its rows at its first row: such an INSERT
-- must hold the locks of all its aggregates before (Enqueue does; see
-- docs/PRODUCERS.md for plain SQL).
--
-- Existing unfinished rows are numbered in id order per aggregate and the
-- aggregates table starts from their numbers. MySQL commits each DDL
-- statement by itself, so every step is idempotent; rows written by
-- producers while this migration runs, between the numbering and the
-- trigger, keep no number (they are delivered, without the sequence
-- header): apply it with the producers stopped for exact numbering.

-- +goose NO TRANSACTION
-- +goose Up
SET @outbox_ddl = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE `{{.Outbox}}` ADD COLUMN aggregate_seq BIGINT NULL', 'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND column_name = 'aggregate_seq');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;

CREATE TABLE IF NOT EXISTS `{{.Outbox}}_aggregates` (
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    last_seq       BIGINT       NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

UPDATE `{{.Outbox}}` o
JOIN (SELECT id, ROW_NUMBER() OVER (PARTITION BY aggregate_type, aggregate_id ORDER BY id) AS seq
      FROM `{{.Outbox}}` WHERE unfinished = 1) n ON o.id = n.id
SET o.aggregate_seq = n.seq
WHERE o.aggregate_seq IS NULL;

INSERT IGNORE INTO `{{.Outbox}}_aggregates` (aggregate_type, aggregate_id, last_seq)
SELECT aggregate_type, aggregate_id, MAX(aggregate_seq) FROM `{{.Outbox}}`
WHERE aggregate_seq IS NOT NULL
GROUP BY aggregate_type, aggregate_id;

DROP TRIGGER IF EXISTS `{{.Outbox}}_before_insert`;

-- +goose StatementBegin
CREATE TRIGGER `{{.Outbox}}_before_insert` BEFORE INSERT ON `{{.Outbox}}` FOR EACH ROW
BEGIN
    DECLARE utc_offset BIGINT DEFAULT 0;
    DECLARE r CHAR(32);
    IF NEW.aggregate_seq IS NULL THEN
        -- A producer other than Enqueue: its times are in its session's zone.
        SET utc_offset = TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), NOW(6));
    END IF;
    IF NEW.event_id IS NULL OR NEW.event_id = '' THEN
        SET r = MD5(UUID());
        SET NEW.event_id = LOWER(CONCAT_WS('-',
            LPAD(HEX(FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) DIV 65536), 8, '0'),
            LPAD(HEX(FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) MOD 65536), 4, '0'),
            CONCAT('7', SUBSTRING(r, 1, 3)),
            CONCAT(HEX(8 + CONV(SUBSTRING(r, 4, 1), 16, 10) MOD 4), SUBSTRING(r, 5, 3)),
            SUBSTRING(r, 8, 12)));
    END IF;
    IF NEW.headers IS NULL THEN
        SET NEW.headers = '{}';
    END IF;
    IF NEW.created_at IS NULL THEN
        SET NEW.created_at = UTC_TIMESTAMP(6);
    ELSEIF utc_offset <> 0 THEN
        SET NEW.created_at = NEW.created_at - INTERVAL utc_offset MICROSECOND;
    END IF;
    IF NEW.available_at IS NULL THEN
        SET NEW.available_at = UTC_TIMESTAMP(6);
    ELSEIF utc_offset <> 0 THEN
        SET NEW.available_at = NEW.available_at - INTERVAL utc_offset MICROSECOND;
    END IF;
    IF NEW.expires_at IS NOT NULL AND utc_offset <> 0 THEN
        SET NEW.expires_at = NEW.expires_at - INTERVAL utc_offset MICROSECOND;
    END IF;
    INSERT INTO `{{.Outbox}}_aggregates` (aggregate_type, aggregate_id, last_seq)
    VALUES (NEW.aggregate_type, NEW.aggregate_id, 1)
    ON DUPLICATE KEY UPDATE last_seq = last_seq + 1;
    SET NEW.aggregate_seq = (SELECT last_seq FROM `{{.Outbox}}_aggregates`
        WHERE aggregate_type = NEW.aggregate_type AND aggregate_id = NEW.aggregate_id);
END
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER IF EXISTS `{{.Outbox}}_before_insert`;
DROP TABLE IF EXISTS `{{.Outbox}}_aggregates`;
SET @outbox_ddl = (SELECT IF(COUNT(*) = 1,
    'ALTER TABLE `{{.Outbox}}` DROP COLUMN aggregate_seq', 'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = '{{.Outbox}}' AND column_name = 'aggregate_seq');
PREPARE outbox_stmt FROM @outbox_ddl;
EXECUTE outbox_stmt;
DEALLOCATE PREPARE outbox_stmt;
