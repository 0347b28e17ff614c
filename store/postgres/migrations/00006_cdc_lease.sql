-- The lease that lets one relay at a time stream from a logical replication
-- slot (--source logical): the others stand by and take over when the
-- holder stops renewing it.

-- +goose Up
SET LOCAL lock_timeout = '10s';

CREATE TABLE IF NOT EXISTS "{{.Outbox}}_cdc_lease" (
    slot       VARCHAR(63)  PRIMARY KEY,
    holder     VARCHAR(200) NOT NULL,
    expires_at TIMESTAMPTZ  NOT NULL
);

-- +goose Down
SET LOCAL lock_timeout = '10s';
DROP TABLE IF EXISTS "{{.Outbox}}_cdc_lease";
