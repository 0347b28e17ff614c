-- The outbox table keeps the columns of the payment story's payment_outbox
-- table (docs/ARCHITECTURE.md): id, aggregate_id, event_type, payload,
-- status, retry_count, created_at, processed_at, with their names and
-- MySQL types, and adds what the guarantees need. It is the PostgreSQL
-- schema in MySQL's types:
--
--   * Timestamps are DATETIME(6): UTC wall-clock time to the microsecond,
--     always written from UTC_TIMESTAMP(6) or from UTC values, so that the
--     session time zone never matters.
--   * event_id and lock_token are UUIDs in their canonical text form
--     (CHAR(36), ASCII, binary collation).
--   * Text columns use utf8mb4 with the binary collation: aggregate ids are
--     compared byte for byte, as on PostgreSQL ('Tx-1' and 'tx-1' are two
--     aggregates).
--   * payload is JSON. On MariaDB JSON is LONGTEXT with a JSON_VALID check,
--     stored byte for byte. MySQL's own JSON type would rewrite the document
--     (key order, number formatting), so on MySQL the store renders the
--     column as exactly that (LONGTEXT + JSON_VALID): the payload columns'
--     type is the JSONText action, rendered by store/mysql/migrate.go.
--   * MySQL has no partial indexes. Two stored generated columns play their
--     part: "unfinished" (1 while the row is PENDING, PROCESSING, BLOCKED or
--     FAILED) follows the aggregate in the per-aggregate index, so that "an
--     aggregate's unfinished rows in id order" is one index range; and
--     "waiting_expires_at" (expires_at while PENDING or BLOCKED, else NULL)
--     is the expiry index.
--
-- MySQL commits each DDL statement by itself, so every step is idempotent:
-- a migration interrupted half-way is completed by running it again.

-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS `{{.Outbox}}` (
    id             BIGINT       NOT NULL AUTO_INCREMENT,
    event_id       CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(200) NOT NULL,
    payload        {{.JSONText "payload"}},
    headers        JSON         NOT NULL,
    status         VARCHAR(20)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'PENDING',
    retry_count    INT          NOT NULL DEFAULT 0,
    created_at     DATETIME(6)  NOT NULL,
    processed_at   DATETIME(6)  NULL,
    available_at   DATETIME(6)  NOT NULL,
    expires_at     DATETIME(6)  NULL,
    locked_until   DATETIME(6)  NULL,
    lock_token     CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NULL,
    last_error     TEXT         NULL,
    unfinished     TINYINT      GENERATED ALWAYS AS
        (status IN ('PENDING', 'PROCESSING', 'BLOCKED', 'FAILED')) STORED,
    waiting_expires_at DATETIME(6) GENERATED ALWAYS AS
        (IF(status IN ('PENDING', 'BLOCKED'), expires_at, NULL)) STORED,
    PRIMARY KEY (id),
    {{.OutboxIndex "event_id_key"}},
    CONSTRAINT `{{.Outbox}}_status_check` CHECK (status IN
        ('PENDING', 'PROCESSING', 'PROCESSED', 'FAILED', 'EXPIRED', 'BLOCKED', 'SKIPPED')),
    -- The claim's window: due PENDING rows in (available_at, id) order. The
    -- reaper reads the PROCESSING range (the rows in flight only), the
    -- sweeper the BLOCKED and FAILED ranges, Stats counts per status.
    {{.OutboxIndex "due_idx"}},
    -- Per-aggregate order: an aggregate's head is its lowest unfinished id.
    {{.OutboxIndex "aggregate_idx"}},
    -- The sweeper expires waiting events past their deadline. The column
    -- is NULL for events without a deadline and for events no longer
    -- waiting, so the index changes only for events with a TTL.
    {{.OutboxIndex "expiry_idx"}}
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- What FAILED, why and when.
CREATE TABLE IF NOT EXISTS `{{.DeadLetters}}` (
    id             BIGINT       NOT NULL AUTO_INCREMENT,
    outbox_id      BIGINT       NOT NULL,
    event_id       CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(200) NOT NULL,
    payload        {{.JSONText "payload"}},
    headers        JSON         NOT NULL,
    retry_count    INT          NOT NULL,
    reason         TEXT         NOT NULL,
    failed_at      DATETIME(6)  NOT NULL,
    requeued_at    DATETIME(6)  NULL,
    PRIMARY KEY (id),
    INDEX `{{.DeadLetters}}_event_idx` (event_id),
    -- Requeue and purge find an event's dead letters by its row id.
    INDEX `{{.DeadLetters}}_outbox_idx` (outbox_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The audit trail: one row per delivery attempt and per operator action.
-- The key makes a replayed completion write nothing twice (INSERT IGNORE).
CREATE TABLE IF NOT EXISTS `{{.Attempts}}` (
    event_id    CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    claim_token CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    outcome     VARCHAR(20)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    outbox_id   BIGINT       NOT NULL,
    attempt     INT          NOT NULL,
    relay_id    VARCHAR(200) NOT NULL,
    started_at  DATETIME(6)  NOT NULL,
    finished_at DATETIME(6)  NOT NULL,
    `error`     TEXT         NULL,
    PRIMARY KEY (event_id, claim_token, outcome)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Per-aggregate producer locks: Enqueue locks the row of each aggregate's
-- bucket (a hash of aggregate type and id, modulo the row count) with
-- SELECT ... FOR UPDATE, so that two transactions enqueueing events of one
-- aggregate are serialized and id order is commit order within an
-- aggregate. The table has a fixed number of rows, written once here and
-- never updated; row locks end with the producer's transaction.
CREATE TABLE IF NOT EXISTS `{{.Outbox}}_aggregate_locks` (
    bucket INT NOT NULL,
    PRIMARY KEY (bucket)
) ENGINE = InnoDB;

INSERT IGNORE INTO `{{.Outbox}}_aggregate_locks` (bucket)
SELECT a.n * 4096 + b.n * 256 + c.n * 16 + d.n FROM
    (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
     UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
     UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) a
CROSS JOIN
    (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
     UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
     UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) b
CROSS JOIN
    (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
     UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
     UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) c
CROSS JOIN
    (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
     UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
     UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) d;

-- +goose Down
DROP TABLE IF EXISTS `{{.Outbox}}_aggregate_locks`;
DROP TABLE IF EXISTS `{{.Attempts}}`;
DROP TABLE IF EXISTS `{{.DeadLetters}}`;
DROP TABLE IF EXISTS `{{.Outbox}}`;
