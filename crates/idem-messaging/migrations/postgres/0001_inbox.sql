-- The inbox: one row per message a consumer has processed, written in the transaction of the
-- consumer's own effects (the store fills in the validated schema and table names before this
-- runs). The primary key is the deduplication: a second copy of a message finds its row.
--
-- `processed_at` is the database server's time of the insert; rows older than the dedup window
-- are purged in bounded batches, oldest first.
CREATE TABLE "{schema}"."{table}" (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL,
    PRIMARY KEY (consumer, message_id)
);

CREATE INDEX "{table}_processed" ON "{schema}"."{table}" (processed_at);
