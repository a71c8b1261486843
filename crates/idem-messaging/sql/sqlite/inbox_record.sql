-- ?1 consumer, ?2 message id. Records the message, or nothing when its row exists: one row
-- affected for a first delivery, none for a duplicate. As the transaction's first write it takes
-- SQLite's write lock, so a concurrent copy of the message waits (busy timeout) for this
-- transaction to end.
INSERT INTO "{schema}"."{table}" (consumer, message_id, processed_at)
VALUES (?1, ?2, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
ON CONFLICT (consumer, message_id) DO NOTHING
