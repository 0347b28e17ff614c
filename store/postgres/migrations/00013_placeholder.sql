-- Placeholder: another part of issue 44 adds the migration of this number
-- in parallel. It does nothing, and is dropped at merge.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
