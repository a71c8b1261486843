-- Streamed parts: the pieces of a response that an execution streams while it runs
-- (`Store::append_part`), so that requests on other instances can follow it (`Store::read_parts`).
-- One row per part, addressed as the records table addresses its record (scope, key digest), then
-- by the fencing token of the execution that wrote it and its index from 0. Parts are opaque bytes
-- (idem-core seals them). A part expires when its record did at the time it was appended
-- (`expires_at`, on the server's clock); it outlives its record's completion or release, until
-- `Store::discard_parts`, `Store::forget` or the purge (`Store::purge_expired`, by `expires_at`)
-- removes it. The parts of an execution that was taken over are left to expire: readers name the
-- token.
--
-- No foreign key to the records table: parts stay after their record is released or forgotten
-- and replaced, and appends (which lock the record `FOR SHARE`, see sql/append_part.sql) are the
-- only writer that needs the record.
CREATE TABLE "{schema}"."{table}_parts" (
    scope      bytea       NOT NULL,
    key        bytea       NOT NULL,
    token      bigint      NOT NULL,
    idx        bigint      NOT NULL CHECK (idx >= 0),
    part       bytea       NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (scope, key, token, idx)
);

-- Expired parts are purged oldest first, in bounded batches, after the expired records. (The
-- name fits PostgreSQL's 63 bytes with the longest table name.)
CREATE INDEX "{table}_parts_exp" ON "{schema}"."{table}_parts" (expires_at);
