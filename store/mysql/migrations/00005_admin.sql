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

-- +goose Down
DROP TABLE IF EXISTS `{{.Outbox}}_relays`;
