-- The data keys of payload encryption (docs/ENCRYPTION.md): one row per
-- subject (an aggregate, or a merchant or customer the producer names) and
-- key version, holding the data key wrapped by a key-encryption key that
-- the database never sees (kek_id names it; base64 text). Shredding a
-- subject clears wrapped_key and records when, by whom and why: every
-- payload sealed with that key can no longer be read. Times are the
-- database clock in Unix milliseconds.

-- +goose Up
CREATE TABLE IF NOT EXISTS "{{.Outbox}}_keys" (
    subject         TEXT    NOT NULL CHECK (length(subject) <= 256),
    version         INTEGER NOT NULL CHECK (version >= 1),
    wrapped_key     TEXT,
    kek_id          TEXT    NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    rewrapped_at_ms INTEGER,
    shredded_at_ms  INTEGER,
    shredded_by     TEXT,
    shred_reason    TEXT,
    PRIMARY KEY (subject, version),
    CHECK ((wrapped_key IS NULL) = (shredded_at_ms IS NOT NULL))
);

-- +goose Down
DROP TABLE IF EXISTS "{{.Outbox}}_keys";
