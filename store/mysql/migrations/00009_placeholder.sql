-- A placeholder for the migration another part of issue 44 adds under this
-- number; it is dropped when the branches merge.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
