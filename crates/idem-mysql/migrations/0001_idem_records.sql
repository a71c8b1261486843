-- Idempotency records, one per (scope, key digest), in the configured table of the connection's
-- database (the store fills in its validated name before this runs).
--
-- Times are milliseconds since the epoch on the database server's clock (UTC_TIMESTAMP, which
-- no session time zone changes). `state` is 'processing' (with `lease_until`, without
-- `response`) or 'completed' (with `completed_at` and `response`, the StoredResponse encoding).
-- `token` is the fencing token of the acquisition that holds or completed the record.
-- `key_digest` is SHA-256 of the idempotency key's UTF-8 bytes: keys can carry customer data (an
-- order number, an e-mail), and a dump of the table must not show them.
CREATE TABLE `{table}` (
    scope        BINARY(32)  NOT NULL,
    key_digest   BINARY(32)  NOT NULL,
    fingerprint  BINARY(32)  NOT NULL,
    state        VARCHAR(10) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    token        BIGINT      NOT NULL,
    lease_until  BIGINT,
    created_at   BIGINT      NOT NULL,
    completed_at BIGINT,
    expires_at   BIGINT      NOT NULL,
    response     LONGBLOB,
    PRIMARY KEY (scope, key_digest),
    -- Expired records are purged oldest first, in bounded batches.
    KEY `{table}_expires_at` (expires_at),
    -- Operators list the records stuck 'processing', newest first, and count the records by
    -- state: a walk down one state's entries (InnoDB appends the primary key to them, so that
    -- records of one millisecond come in (scope, key) order too).
    KEY `{table}_state_created` (state, created_at),
    CONSTRAINT `{table}_state` CHECK (
        (state = 'processing' AND lease_until IS NOT NULL AND response IS NULL)
        OR (state = 'completed' AND completed_at IS NOT NULL AND response IS NOT NULL)
    )
) ENGINE = InnoDB;

-- Fencing tokens, store-wide: a token is drawn by inserting a row (and the row is deleted in the
-- same transaction), after the records it is for are locked, so that it is larger than every
-- token their earlier holders drew. InnoDB keeps the counter across restarts (MySQL 8.0,
-- MariaDB 10.2.4 and later), and never hands a value out twice.
CREATE TABLE `{table}_tokens` (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY
) ENGINE = InnoDB;

-- The census board: the census last posted and the current claim on the next, one row for the
-- table, so that the gateways sharing the table take one census at a time.
CREATE TABLE `{table}_census` (
    id                SMALLINT NOT NULL PRIMARY KEY CHECK (id = 0),
    claimant          BIGINT,
    claimed_until     BIGINT,
    posted_at         BIGINT,
    next_at           BIGINT,
    processing        BIGINT,
    completed         BIGINT,
    oldest_processing BIGINT
) ENGINE = InnoDB;

INSERT INTO `{table}_census` (id) VALUES (0);
