-- The census board: the census last posted and the current claim on the next, one row for the
-- whole file, so that the processes sharing the file take one census at a time.
CREATE TABLE idem_census (
    id                INTEGER PRIMARY KEY CHECK (id = 0),
    claimant          INTEGER,
    claimed_until     INTEGER,
    posted_at         INTEGER,
    next_at           INTEGER,
    processing        INTEGER,
    completed         INTEGER,
    oldest_processing INTEGER
);

INSERT INTO idem_census (id) VALUES (0);
