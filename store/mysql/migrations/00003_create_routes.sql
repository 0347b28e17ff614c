-- The circuit breaker of every route (a sink plus its routed destination),
-- shared by every relay of the outbox: one row per route that ever changed
-- state (a route without a row is CLOSED), and an append-only audit row per
-- transition. Times are the database clock in Unix milliseconds. Route
-- names are compared byte for byte (utf8mb4_bin), as on PostgreSQL.
--
-- MySQL commits each DDL statement by itself, so every step is idempotent.

-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS `{{.Outbox}}_routes` (
    route         VARCHAR(400) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    state         VARCHAR(10)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    version       BIGINT       NOT NULL,
    opened_at_ms  BIGINT       NULL,
    probe_at_ms   BIGINT       NULL,
    probe_by      VARCHAR(200) NULL,
    opens         INT          NOT NULL DEFAULT 0,
    forced        SMALLINT     NOT NULL DEFAULT 0,
    last_error    TEXT         NULL,
    updated_at_ms BIGINT       NOT NULL,
    PRIMARY KEY (route),
    CONSTRAINT `{{.Outbox}}_routes_state_check` CHECK (state IN ('CLOSED', 'OPEN', 'HALF_OPEN'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `{{.Outbox}}_route_log` (
    id         BIGINT       NOT NULL AUTO_INCREMENT,
    at_ms      BIGINT       NOT NULL,
    route      VARCHAR(400) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    actor      VARCHAR(200) NOT NULL,
    from_state VARCHAR(10)  NOT NULL,
    to_state   VARCHAR(10)  NOT NULL,
    reason     TEXT         NOT NULL,
    last_error TEXT         NULL,
    PRIMARY KEY (id),
    INDEX `{{.Outbox}}_route_log_route_idx` (route, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE IF EXISTS `{{.Outbox}}_route_log`;
DROP TABLE IF EXISTS `{{.Outbox}}_routes`;
