-- ? batch size. Runs first in the relay's claim transaction (outbox_claim_begin.sql), which stays
-- open while the batch is published and then deletes what the broker confirmed.
--
-- Takes up to that many due messages, oldest first, and locks them, skipping those another relay
-- holds: they stay this transaction's until it commits or rolls back. A relay that dies rolls
-- back (its connection closes) and its messages are due again at once. A relay that hangs holds
-- them for the lease (the session's `wait_timeout`).
-- The ordering placeholder below is empty, or the condition that keeps a message back while an
-- earlier message of its ordering key is pending (sql/outbox_ordering.sql). Its subquery reads
-- without locking, so an earlier message another relay holds still keeps the later ones back:
-- MySQL 8.0 does not extend the statement's FOR UPDATE to subqueries, and MariaDB does not make
-- them skip locked rows.
--
-- The `_available` index is forced: read in its order, the claim stops at its batch, where a scan
-- and a sort (which the optimizer picks for a small outbox) would lock every due message.
SELECT o.seq, o.id, o.destination, o.ordering_key, o.headers, o.payload, o.attempts
FROM {qualified} AS o FORCE INDEX (`{table}_available`)
WHERE o.state = 'pending' AND o.available_at <= UTC_TIMESTAMP(6)
{ordering}
ORDER BY o.available_at
LIMIT ?
FOR UPDATE SKIP LOCKED
