-- The data keys of payload encryption (docs/ENCRYPTION.md): one row per
-- subject (an aggregate, or a merchant or customer the producer names) and
-- key version, holding the data key wrapped by a key-encryption key that
-- the database never sees (kek_id names it; base64 text). Shredding a
-- subject clears wrapped_key and records when, by whom and why: every
-- payload sealed with that key can no longer be read. Times are the
-- database clock in Unix milliseconds. Subjects (up to 256 characters of
-- UTF-8) are bytes, compared byte for byte as on PostgreSQL: no collation
-- folds case or ignores trailing spaces.
--
-- MySQL commits each DDL statement by itself, so every step is idempotent.

-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS `{{.Outbox}}_keys` (
    subject         VARBINARY(1024) NOT NULL,
    version         INT          NOT NULL,
    wrapped_key     TEXT         CHARACTER SET ascii COLLATE ascii_bin NULL,
    kek_id          VARCHAR(200) NOT NULL,
    created_at_ms   BIGINT       NOT NULL,
    rewrapped_at_ms BIGINT       NULL,
    shredded_at_ms  BIGINT       NULL,
    shredded_by     VARCHAR(200) NULL,
    shred_reason    TEXT         NULL,
    PRIMARY KEY (subject, version),
    CONSTRAINT `{{.Outbox}}_keys_version_check` CHECK (version >= 1),
    CONSTRAINT `{{.Outbox}}_keys_shred_check` CHECK ((wrapped_key IS NULL) = (shredded_at_ms IS NOT NULL))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE IF EXISTS `{{.Outbox}}_keys`;
