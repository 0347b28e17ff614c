-- The inbox remembers, per consumer, the event ids it has handled (and,
-- for the HTTP middleware, the response to replay), and per consumer and
-- aggregate the highest sequence number seen. Times are Unix milliseconds
-- of SQLite's clock.

-- +goose Up
CREATE TABLE IF NOT EXISTS {{.Inbox}} (
    consumer              TEXT    NOT NULL,
    event_id              TEXT    NOT NULL,
    recorded_at           INTEGER NOT NULL,
    response_status       INTEGER,
    response_content_type TEXT,
    response_body         BLOB,
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX IF NOT EXISTS {{.InboxIndex}} ON {{.Inbox}} (recorded_at);

CREATE TABLE IF NOT EXISTS {{.Sequences}} (
    consumer       TEXT    NOT NULL,
    aggregate_type TEXT    NOT NULL,
    aggregate_id   TEXT    NOT NULL,
    last_seq       INTEGER NOT NULL,
    prev_seq       INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    PRIMARY KEY (consumer, aggregate_type, aggregate_id)
);
CREATE INDEX IF NOT EXISTS {{.SequencesIndex}} ON {{.Sequences}} (updated_at);

-- +goose Down
DROP TABLE IF EXISTS {{.Sequences}};
DROP TABLE IF EXISTS {{.Inbox}};
