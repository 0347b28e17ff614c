-- On an adopted table (outbox migrate --adopt; its record table
-- <outbox>_adoption exists), a dead letter for each FAILED row that has
-- none: the rows the previous scheduler had given up on. The reason says
-- so, with the row's last error when the team's table had one; the row
-- keeps its retry_count, gets the reason as its last_error when it had
-- none (what `outbox events list` shows), and an ADOPTED row in its audit
-- trail. A table that outbox created is not touched: its FAILED rows got
-- their dead letters when they failed. (The event_id default that
-- adoption adds is dropped by the adoption itself once the insert trigger
-- of migration 00002 exists, as on PostgreSQL's migration 00011.)
--
-- Every step skips what is already done, so the migration can run again.
-- A procedure holds the steps: creating it commits by itself, hence NO
-- TRANSACTION (it needs the CREATE ROUTINE privilege, as migration 00005).

-- +goose NO TRANSACTION
-- +goose Up
DROP PROCEDURE IF EXISTS `{{.Outbox}}_adopted_failed`;
-- +goose StatementBegin
CREATE PROCEDURE `{{.Outbox}}_adopted_failed`()
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE()
               AND table_name = '{{.Outbox}}_adoption') THEN
        START TRANSACTION;
        INSERT INTO `{{.DeadLetters}}` (outbox_id, event_id, aggregate_type, aggregate_id, event_type, payload, headers,
            retry_count, reason, failed_at)
        SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
            COALESCE(o.retry_count, 0),
            CONCAT('adopted as FAILED: the previous scheduler had failed it before outbox adopted the table',
                COALESCE(CONCAT('; its last error: ', LEFT(o.last_error, 2000)), '')),
            COALESCE(o.processed_at, UTC_TIMESTAMP(6))
        FROM `{{.Outbox}}` o
        WHERE o.status = 'FAILED'
          AND NOT EXISTS (SELECT 1 FROM `{{.DeadLetters}}` d WHERE d.event_id = o.event_id);

        INSERT IGNORE INTO `{{.Attempts}}` (event_id, claim_token, outcome, outbox_id, attempt, relay_id, started_at, finished_at, `error`)
        SELECT o.event_id, UUID(), 'ADOPTED', o.id, COALESCE(o.retry_count, 0), 'outbox migrate --adopt', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6),
            'FAILED under the previous scheduler when outbox adopted the table: kept FAILED, with a dead letter'
        FROM `{{.Outbox}}` o
        WHERE o.status = 'FAILED'
          AND NOT EXISTS (SELECT 1 FROM `{{.Attempts}}` a WHERE a.event_id = o.event_id AND a.outcome = 'ADOPTED');

        UPDATE `{{.Outbox}}` o JOIN `{{.DeadLetters}}` d ON d.event_id = o.event_id AND d.requeued_at IS NULL
        SET o.last_error = d.reason
        WHERE o.status = 'FAILED' AND o.last_error IS NULL;
        COMMIT;
    END IF;
END
-- +goose StatementEnd
CALL `{{.Outbox}}_adopted_failed`();
DROP PROCEDURE IF EXISTS `{{.Outbox}}_adopted_failed`;

-- +goose Down
-- The dead letters stay: they describe the rows.
DROP PROCEDURE IF EXISTS `{{.Outbox}}_adopted_failed`;
