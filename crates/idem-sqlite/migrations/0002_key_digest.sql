-- Records are addressed by a digest of the idempotency key, SHA-256 of its UTF-8 bytes, rather
-- than the key itself: keys can carry customer data (an order number, an e-mail), and a copy of
-- the file must not show them. SQLite cannot compute SHA-256, so the records already stored are
-- set aside in `idem_records_0001`; the store converts them right after this migration, in the
-- same transaction (migrations run under the write lock when the store opens), and drops that
-- table. A file is never left half converted.
ALTER TABLE idem_records RENAME TO idem_records_0001;
DROP INDEX idem_records_expires_at;

CREATE TABLE idem_records (
    scope        BLOB    NOT NULL,
    key          BLOB    NOT NULL,
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
