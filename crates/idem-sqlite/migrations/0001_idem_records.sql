-- Idempotency records, one per (scope, key). Times are milliseconds since the Unix epoch, read
-- from the store's clock. `state` is 1 while processing (with `lease_until`, without `response`)
-- and 2 once completed (with `completed_at` and `response`, the StoredResponse encoding).
-- A rowid table rather than WITHOUT ROWID: responses can be large, and the response column comes
-- last so that reading the other columns does not load its overflow pages.
CREATE TABLE idem_records (
    scope        BLOB    NOT NULL,
    key          TEXT    NOT NULL,
    fingerprint  BLOB    NOT NULL,
    state        INTEGER NOT NULL,
    token        INTEGER NOT NULL,
    lease_until  INTEGER,
    created_at   INTEGER NOT NULL,
    completed_at INTEGER,
    expires_at   INTEGER NOT NULL,
    response     BLOB,
    PRIMARY KEY (scope, key)
);

CREATE INDEX idem_records_expires_at ON idem_records (expires_at);

-- The last fencing token issued, store-wide: a token is never reused for an address, even after
-- its record was released, forgotten or purged.
CREATE TABLE idem_fencing (
    id   INTEGER PRIMARY KEY CHECK (id = 0),
    last INTEGER NOT NULL
);

INSERT INTO idem_fencing (id, last) VALUES (0, 0);
