-- The inbox remembers, per consumer, the event ids it has handled (and,
-- for the HTTP middleware, the response to replay), and per consumer and
-- aggregate the highest sequence number seen.

-- +goose Up
SET LOCAL lock_timeout = '10s';

CREATE TABLE IF NOT EXISTS {{.Inbox}} (
    consumer              TEXT        NOT NULL,
    event_id              TEXT        NOT NULL,
    recorded_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    response_status       INTEGER,
    response_content_type TEXT,
    response_body         BYTEA,
    PRIMARY KEY (consumer, event_id)
);
-- Retention deletes the oldest ids first.
CREATE INDEX IF NOT EXISTS {{.InboxIndex}} ON {{.Inbox}} (recorded_at);

CREATE TABLE IF NOT EXISTS {{.Sequences}} (
    consumer       TEXT        NOT NULL,
    aggregate_type TEXT        NOT NULL,
    aggregate_id   TEXT        NOT NULL,
    last_seq       BIGINT      NOT NULL,
    prev_seq       BIGINT      NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, aggregate_type, aggregate_id)
);
CREATE INDEX IF NOT EXISTS {{.SequencesIndex}} ON {{.Sequences}} (updated_at);

-- +goose Down
SET LOCAL lock_timeout = '10s';
DROP TABLE IF EXISTS {{.Sequences}};
DROP TABLE IF EXISTS {{.Inbox}};
