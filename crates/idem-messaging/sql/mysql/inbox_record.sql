-- ? consumer, ? message id. Records the message, or nothing when its row exists. A first delivery
-- inserts; a duplicate takes the update branch, which changes nothing but calls
-- LAST_INSERT_ID(1): the statement's insert id (in the server's answer) is 0 for a first delivery
-- and 1 for a duplicate. (The affected rows cannot tell them apart: sqlx connects with
-- CLIENT_FOUND_ROWS, so an unchanged row counts as 1, as an insert does.) Unlike INSERT IGNORE,
-- this fails on every error but the duplicate key.
--
-- While another transaction holds an uncommitted row for the same message, this statement waits
-- for it to end: after a commit it is a duplicate, after a rollback it inserts.
INSERT INTO {qualified} (consumer, message_id, processed_at)
VALUES (?, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE processed_at = IF(LAST_INSERT_ID(1), processed_at, processed_at)
