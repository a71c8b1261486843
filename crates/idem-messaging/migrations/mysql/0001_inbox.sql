-- The inbox: one row per message a consumer has processed, written in the transaction of the
-- consumer's own effects. The primary key is the deduplication: a second copy of a message finds
-- its row. The names are compared byte for byte (binary strings: no case folding, no trailing
-- space padding), as PostgreSQL and SQLite compare text; both are at most 255 bytes.
--
-- `processed_at` is the database server's time of the insert, in UTC; rows older than the dedup
-- window are purged in bounded batches, oldest first.
CREATE TABLE {qualified} (
    consumer     VARBINARY(255) NOT NULL,
    message_id   VARBINARY(255) NOT NULL,
    processed_at DATETIME(6)    NOT NULL,
    PRIMARY KEY (consumer, message_id),
    INDEX `{table}_processed` (processed_at)
) ENGINE = InnoDB;
