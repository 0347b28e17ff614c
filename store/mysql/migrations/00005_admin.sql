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

-- The overview's throughput graph counts the last minutes' attempts.
-- MySQL has no CREATE INDEX IF NOT EXISTS, so a procedure adds the index
-- only when it is missing, and the step stays idempotent (it needs the
-- CREATE ROUTINE privilege, as the migrations' other DDL needs its own).
DROP PROCEDURE IF EXISTS `{{.Outbox}}_add_finished_idx`;
-- +goose StatementBegin
CREATE PROCEDURE `{{.Outbox}}_add_finished_idx`()
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE()
                   AND table_name = '{{.Attempts}}' AND index_name = '{{.Attempts}}_finished_idx') THEN
        ALTER TABLE `{{.Attempts}}` ADD INDEX `{{.Attempts}}_finished_idx` (finished_at, outcome);
    END IF;
END
-- +goose StatementEnd
CALL `{{.Outbox}}_add_finished_idx`();
DROP PROCEDURE IF EXISTS `{{.Outbox}}_add_finished_idx`;

-- +goose Down
DROP PROCEDURE IF EXISTS `{{.Outbox}}_drop_finished_idx`;
-- +goose StatementBegin
CREATE PROCEDURE `{{.Outbox}}_drop_finished_idx`()
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE()
               AND table_name = '{{.Attempts}}' AND index_name = '{{.Attempts}}_finished_idx') THEN
        ALTER TABLE `{{.Attempts}}` DROP INDEX `{{.Attempts}}_finished_idx`;
    END IF;
END
-- +goose StatementEnd
CALL `{{.Outbox}}_drop_finished_idx`();
DROP PROCEDURE IF EXISTS `{{.Outbox}}_drop_finished_idx`;
DROP TABLE IF EXISTS `{{.Outbox}}_relays`;
