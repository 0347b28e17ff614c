-- The audit of a successful delivery lives on the event row: the relay
-- that delivered it, the attempt number, the relay's start and finish
-- times and the trace id. A DELIVERED outcome then writes no row in the
-- attempts table; the attempts table keeps every other attempt (failed,
-- retried, fenced, expired, operator actions), and the audit trail of an
-- event is the union of both (Store.Attempts). delivered_token is the
-- token of the claim that delivered the event, the audit's claim token
-- (lock_token is cleared as before). An operator requeue of a delivered event first copies that
-- delivery into the attempts table, so a second delivery overwrites
-- nothing.
--
-- The columns are nullable without a default: adding them rewrites no row,
-- existing PROCESSED rows keep their attempt rows, and a table adopted
-- by "outbox migrate --adopt" upgrades the same way.

-- +goose Up
SET LOCAL lock_timeout = '10s';

ALTER TABLE "{{.Outbox}}"
    ADD COLUMN IF NOT EXISTS delivered_relay_id    VARCHAR(200),
    ADD COLUMN IF NOT EXISTS delivered_attempt     INT,
    ADD COLUMN IF NOT EXISTS delivered_started_at  TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS delivered_finished_at TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS delivered_trace_id    VARCHAR(32),
    ADD COLUMN IF NOT EXISTS delivered_token       UUID;

-- +goose Down
SET LOCAL lock_timeout = '10s';
-- Deliveries recorded on the row go back to the attempts table first.
INSERT INTO "{{.Attempts}}" (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, trace_id)
SELECT event_id, COALESCE(delivered_token, gen_random_uuid()), 'DELIVERED', id, delivered_attempt, delivered_relay_id,
    delivered_started_at, delivered_finished_at, delivered_trace_id
FROM "{{.Outbox}}" WHERE delivered_relay_id IS NOT NULL
ON CONFLICT DO NOTHING;
ALTER TABLE "{{.Outbox}}"
    DROP COLUMN IF EXISTS delivered_relay_id,
    DROP COLUMN IF EXISTS delivered_attempt,
    DROP COLUMN IF EXISTS delivered_started_at,
    DROP COLUMN IF EXISTS delivered_finished_at,
    DROP COLUMN IF EXISTS delivered_trace_id,
    DROP COLUMN IF EXISTS delivered_token;
