-- The census board: the census last posted and the current claim on the next, one row for the
-- table, so that the gateways sharing the table take one census at a time.
CREATE TABLE "{schema}"."{table}_census" (
    id                smallint PRIMARY KEY CHECK (id = 0),
    claimant          bigint,
    claimed_until     timestamptz,
    posted_at         timestamptz,
    next_at           timestamptz,
    processing        bigint,
    completed         bigint,
    oldest_processing timestamptz
);

INSERT INTO "{schema}"."{table}_census" (id) VALUES (0);
