-- The circuit breaker of every route (a sink plus its routed destination),
-- shared by every relay of the outbox: one row per route that ever changed
-- state (a route without a row is CLOSED), and an append-only audit row per
-- transition. Times are the database clock in Unix milliseconds.

-- +goose Up
CREATE TABLE IF NOT EXISTS "{{.Outbox}}_routes" (
    route         TEXT    PRIMARY KEY CHECK (length(route) <= 400),
    state         TEXT    NOT NULL CHECK (state IN ('CLOSED', 'OPEN', 'HALF_OPEN')),
    version       INTEGER NOT NULL,
    opened_at_ms  INTEGER,
    probe_at_ms   INTEGER,
    probe_by      TEXT,
    opens         INTEGER NOT NULL DEFAULT 0,
    forced        INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT,
    updated_at_ms INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_route_log" (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms      INTEGER NOT NULL,
    route      TEXT    NOT NULL,
    actor      TEXT    NOT NULL,
    from_state TEXT    NOT NULL,
    to_state   TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS "{{.Outbox}}_route_log_route_idx" ON "{{.Outbox}}_route_log" (route, id);

-- +goose Down
DROP TABLE IF EXISTS "{{.Outbox}}_route_log";
DROP TABLE IF EXISTS "{{.Outbox}}_routes";
