-- The inbox remembers, per consumer, the event ids it has handled (and,
-- for the HTTP middleware, the response to replay), and per consumer and
-- aggregate the highest sequence number seen.
--
-- Keys are VARBINARY: compared byte for byte, with no case folding and no
-- trailing-space padding, so that two ids that differ only there are two
-- ids, as on PostgreSQL and SQLite. Times are UTC_TIMESTAMP(6) values, so
-- that the session time zone never matters. MySQL commits each DDL
-- statement by itself, so every step is idempotent.

-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS {{.Inbox}} (
    consumer              VARBINARY(200) NOT NULL,
    event_id              VARBINARY(255) NOT NULL,
    recorded_at           DATETIME(6)    NOT NULL,
    response_status       INT            NULL,
    response_content_type TEXT           CHARACTER SET utf8mb4 NULL,
    response_body         LONGBLOB       NULL,
    PRIMARY KEY (consumer, event_id),
    KEY {{.InboxIndex}} (recorded_at)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS {{.Sequences}} (
    consumer       VARBINARY(200) NOT NULL,
    aggregate_type VARBINARY(255) NOT NULL,
    aggregate_id   VARBINARY(255) NOT NULL,
    last_seq       BIGINT         NOT NULL,
    prev_seq       BIGINT         NOT NULL,
    updated_at     DATETIME(6)    NOT NULL,
    PRIMARY KEY (consumer, aggregate_type, aggregate_id),
    KEY {{.SequencesIndex}} (updated_at)
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE IF EXISTS {{.Sequences}};
DROP TABLE IF EXISTS {{.Inbox}};
