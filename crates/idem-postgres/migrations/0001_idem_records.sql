-- Idempotency records, one per (scope, key), in the configured schema and table (the store fills
-- in their validated names before this runs).
--
-- Times are the database server's (`statement_timestamp()`, truncated to the millisecond).
-- `state` is 'processing' (with `lease_until`, without `response`) or 'completed' (with
-- `completed_at` and `response`, the StoredResponse encoding). `token` is the fencing token of the
-- acquisition that holds or completed the record. `watched` is set by the first request that finds
-- the record in flight: completing, releasing or forgetting a watched record notifies the other
-- instances (NOTIFY serializes commits, so records nobody waits for skip it).
CREATE TABLE "{schema}"."{table}" (
    scope        bytea       NOT NULL,
    key          text        NOT NULL,
    fingerprint  bytea       NOT NULL,
    state        text        NOT NULL,
    token        bigint      NOT NULL,
    lease_until  timestamptz,
    created_at   timestamptz NOT NULL,
    completed_at timestamptz,
    expires_at   timestamptz NOT NULL,
    response     bytea,
    watched      boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (scope, key),
    CONSTRAINT "{table}_state" CHECK (
        (state = 'processing' AND lease_until IS NOT NULL AND response IS NULL)
        OR (state = 'completed' AND completed_at IS NOT NULL AND response IS NOT NULL)
    )
);

-- Expired records are purged oldest first, in bounded batches.
CREATE INDEX "{table}_expires_at" ON "{schema}"."{table}" (expires_at);

-- Fencing tokens, store-wide: a token is never reused for an address, even after its record was
-- released, forgotten or purged. Cached values are lost on a server restart, which only skips
-- numbers.
CREATE SEQUENCE "{schema}"."{table}_tokens" AS bigint;
