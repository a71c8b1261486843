-- $1 consumer, $2 message id. Records the message, or nothing when its row exists: one row
-- affected for a first delivery, none for a duplicate. While another transaction holds an
-- uncommitted row for the same message, this statement waits for it to end: after a commit it
-- affects none (a duplicate), after a rollback it inserts.
INSERT INTO "{schema}"."{table}" (consumer, message_id, processed_at)
VALUES ($1, $2, statement_timestamp())
ON CONFLICT (consumer, message_id) DO NOTHING
