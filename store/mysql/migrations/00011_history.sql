-- History, as on PostgreSQL (its migration 00014) and SQLite (00010):
-- finished events and their attempts, out of the hot table, kept by month
-- of the event's finish time. Both history tables are partitioned by
-- RANGE on month (YYYYMM of the finish time, UTC), one partition per
-- month (p<YYYYMM>: the rows below the next month) and pmax above them;
-- the mover adds a month's partition ahead of its rows by reorganizing
-- pmax (empty) or the lowest partition, and retention drops whole
-- partitions (ALTER TABLE ... DROP PARTITION), recorded in
-- <outbox>_history_drops. A partitioned table admits no unique key
-- without the partitioning column, hence month first in the primary keys.
-- History rows are only ever inserted, never updated.
--
-- MySQL commits each DDL statement by itself.

-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS `{{.Outbox}}_history` (
    month                 INT          NOT NULL,
    id                    BIGINT       NOT NULL,
    event_id              CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    aggregate_type        VARCHAR(100) NOT NULL,
    aggregate_id          VARCHAR(100) NOT NULL,
    aggregate_seq         BIGINT       NULL,
    event_type            VARCHAR(200) NOT NULL,
    payload               {{.JSONText "payload"}},
    headers               LONGTEXT     NOT NULL,
    status                VARCHAR(20)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    retry_count           INT          NOT NULL,
    created_at            DATETIME(6)  NOT NULL,
    available_at          DATETIME(6)  NOT NULL,
    expires_at            DATETIME(6)  NULL,
    finished_at           DATETIME(6)  NOT NULL,
    last_error            TEXT         NULL,
    delivered_relay_id    VARCHAR(200) NULL,
    delivered_attempt     INT          NULL,
    delivered_token       CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NULL,
    delivered_started_at  DATETIME(6)  NULL,
    delivered_finished_at DATETIME(6)  NULL,
    delivered_trace_id    CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NULL,
    delivered_receipt     TEXT         NULL,
    moved_at              DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (month, id),
    KEY `{{.Outbox}}_history_event_idx` (event_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin
PARTITION BY RANGE (month) (PARTITION pmax VALUES LESS THAN MAXVALUE);

CREATE TABLE IF NOT EXISTS `{{.Outbox}}_attempts_history` (
    month             INT          NOT NULL,
    event_id          CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    claim_token       CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    outcome           VARCHAR(20)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    outbox_id         BIGINT       NOT NULL,
    attempt           INT          NOT NULL,
    relay_id          VARCHAR(200) NOT NULL,
    started_at        DATETIME(6)  NOT NULL,
    finished_at       DATETIME(6)  NOT NULL,
    `error`           TEXT         NULL,
    trace_id          CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NULL,
    receipt           TEXT         NULL,
    event_finished_at DATETIME(6)  NOT NULL,
    moved_at          DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (month, event_id, claim_token, outcome),
    KEY `{{.Outbox}}_history_a_event_idx` (event_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin
PARTITION BY RANGE (month) (PARTITION pmax VALUES LESS THAN MAXVALUE);

CREATE TABLE IF NOT EXISTS `{{.Outbox}}_history_drops` (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    month      INT          NOT NULL,
    events     BIGINT       NOT NULL,
    attempts   BIGINT       NOT NULL,
    cutoff     DATETIME(6)  NOT NULL,
    dropped_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE IF EXISTS `{{.Outbox}}_history_drops`;
DROP TABLE IF EXISTS `{{.Outbox}}_attempts_history`;
DROP TABLE IF EXISTS `{{.Outbox}}_history`;
