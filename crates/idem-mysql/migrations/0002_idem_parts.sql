-- The parts of streamed responses (`Store::append_part`), so that requests on other instances
-- can follow an execution while it runs: one row per part, keyed by the record's address as the
-- records table keys it (scope, key digest), the fencing token of the execution that streams
-- it, and the part's index from 0. `part` is opaque bytes (sealed, when the records are, by the
-- caller). `expires_at` is the record's `expires_at` when the part was appended, in
-- milliseconds since the epoch on the database server's clock: a part is read until then, and
-- purged after, with the expired records. No foreign key: the parts of an execution outlive its
-- record's completion or release (readers name the token), until they are discarded or expire.
CREATE TABLE `{table}_parts` (
    scope      BINARY(32)   NOT NULL,
    key_digest BINARY(32)   NOT NULL,
    token      BIGINT       NOT NULL,
    idx        INT UNSIGNED NOT NULL,
    part       LONGBLOB     NOT NULL,
    expires_at BIGINT       NOT NULL,
    PRIMARY KEY (scope, key_digest, token, idx),
    -- Expired parts are purged oldest first, in bounded batches. (An index's name is the
    -- table's own in MySQL: this one needs no prefix, which a table name of 52 bytes would push
    -- past 64.)
    KEY parts_expires_at (expires_at)
) ENGINE = InnoDB;
