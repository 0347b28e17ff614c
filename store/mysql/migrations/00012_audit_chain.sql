-- The audit chain (store/chain.go). Every row inserted into the attempts
-- table, the route log, the history and the audit log is chained in the inserting
-- transaction by an AFTER INSERT trigger: it adds one link to
-- <outbox>_chain with the record's kind, its ref (key), the SHA-256 of its
-- content (digest) and the link hash over the previous link's hash. The
-- head row is read FOR UPDATE, so links are numbered and hashed in the
-- order their transactions commit, without gaps. A delivery on the hot
-- path writes no attempts row (it is recorded on the event row), so it
-- takes no part in this. Records written before this migration are not
-- chained: the head's genesis_ms says when the chain began. Every step can
-- run again (MySQL commits each DDL statement by itself).

-- +goose Up
CREATE TABLE IF NOT EXISTS `{{.Outbox}}_audit_log` (
    id     BIGINT       NOT NULL AUTO_INCREMENT,
    at_ms  BIGINT       NOT NULL,
    kind   VARCHAR(40)  NOT NULL,
    actor  VARCHAR(200) NOT NULL,
    detail TEXT         NOT NULL,
    PRIMARY KEY (id),
    INDEX `{{.Outbox}}_audit_log_kind_idx` (kind, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `{{.Outbox}}_chain` (
    seq        BIGINT       NOT NULL,
    kind       VARCHAR(20)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    ref        VARCHAR(400) NOT NULL,
    digest     CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    hash       CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    chained_ms BIGINT       NOT NULL,
    record_ms  BIGINT       NOT NULL,
    PRIMARY KEY (seq),
    INDEX `{{.Outbox}}_chain_ref_idx` (kind, ref)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `{{.Outbox}}_chain_head` (
    id         INT      NOT NULL,
    seq        BIGINT   NOT NULL,
    hash       CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    genesis_ms BIGINT   NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB;
INSERT IGNORE INTO `{{.Outbox}}_chain_head` (id, seq, hash, genesis_ms) VALUES (1, 0, REPEAT('0', 64), {{.ChainClockMS}});
{{range .ChainKinds}}
DROP TRIGGER IF EXISTS `{{$.Outbox}}_chain_{{.}}`;

-- +goose StatementBegin
CREATE TRIGGER `{{$.Outbox}}_chain_{{.}}` AFTER INSERT ON `{{$.ChainTableOf .}}` FOR EACH ROW
BEGIN
    DECLARE r VARCHAR(400);
    DECLARE d CHAR(64);
    DECLARE ms BIGINT;
    DECLARE rm BIGINT;
    DECLARE s BIGINT;
    DECLARE h CHAR(64);
    SET r = {{$.ChainRef . "NEW."}};
    SET d = {{$.ChainDigest . "NEW."}};
    SET ms = {{$.ChainClockMS}};
    SET rm = {{$.ChainRecordMS . "NEW." "ms"}};
    SELECT seq + 1, hash INTO s, h FROM `{{$.Outbox}}_chain_head` WHERE id = 1 FOR UPDATE;
    SET h = {{$.ChainLink . "h" "s" "r" "d" "ms" "rm"}};
    UPDATE `{{$.Outbox}}_chain_head` SET seq = s, hash = h WHERE id = 1;
    INSERT INTO `{{$.Outbox}}_chain` (seq, kind, ref, digest, hash, chained_ms, record_ms) VALUES (s, '{{.}}', r, d, h, ms, rm);
END;
-- +goose StatementEnd
{{end}}
-- +goose Down
{{range .ChainKinds}}DROP TRIGGER IF EXISTS `{{$.Outbox}}_chain_{{.}}`;
{{end}}DROP TABLE IF EXISTS `{{.Outbox}}_chain_head`;
DROP TABLE IF EXISTS `{{.Outbox}}_chain`;
DROP TABLE IF EXISTS `{{.Outbox}}_audit_log`;
