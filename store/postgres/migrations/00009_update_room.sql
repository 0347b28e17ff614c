-- Room on every heap page for the new versions of its rows. A claim and a
-- completion each write a new version of the event row; when it fits on
-- the row's own page, PostgreSQL logs only the bytes that changed (the
-- payload is not logged again), does not lock the old version in a WAL
-- record of its own, and dirties one page instead of two. New pages are
-- filled to the fillfactor; existing pages are not rewritten.

-- +goose Up
SET LOCAL lock_timeout = '10s';
ALTER TABLE "{{.Outbox}}" SET (fillfactor = 50);

-- +goose Down
SET LOCAL lock_timeout = '10s';
ALTER TABLE "{{.Outbox}}" RESET (fillfactor);
