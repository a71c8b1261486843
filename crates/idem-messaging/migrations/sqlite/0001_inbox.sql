-- The inbox: one row per message a consumer has processed, written in the transaction of the
-- consumer's own effects. The primary key is the deduplication: a second copy of a message finds
-- its row. `processed_at` is milliseconds since the Unix epoch, the time of the insert; rows
-- older than the dedup window are purged in bounded batches, oldest first.
CREATE TABLE "{schema}"."{table}" (
    consumer     TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    processed_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id)
);

CREATE INDEX "{schema}"."{table}_processed" ON "{table}" (processed_at);
