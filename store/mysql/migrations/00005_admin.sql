-- The admin API: relays report a heartbeat row. The event list's filters
-- already have indexes on MySQL: status leads the due index, and the
-- aggregate index covers every status (unfinished is its third column).

-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS `{{.Outbox}}_relays` (
    relay_id     VARCHAR(200) NOT NULL,
    host         VARCHAR(200) NOT NULL,
    started_at   DATETIME(6)  NOT NULL,
    heartbeat_at DATETIME(6)  NOT NULL,
    in_flight    INT          NOT NULL DEFAULT 0,
    PRIMARY KEY (relay_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The overview's throughput graph counts the last hour's attempts. MySQL
-- has no CREATE INDEX IF NOT EXISTS: ALTER TABLE ... ADD INDEX is one
-- statement, so a rerun after it succeeded fails only if goose could not
-- record the version in between.
ALTER TABLE `{{.Attempts}}` ADD INDEX `{{.Attempts}}_finished_idx` (finished_at, outcome);

-- +goose Down
ALTER TABLE `{{.Attempts}}` DROP INDEX `{{.Attempts}}_finished_idx`;
DROP TABLE IF EXISTS `{{.Outbox}}_relays`;
