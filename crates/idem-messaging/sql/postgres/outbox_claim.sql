-- $1 lease in milliseconds, $2 batch size. Runs first in the relay's claim transaction, which
-- stays open while the batch is published and then deletes what the broker confirmed.
--
-- Takes up to $2 due messages, oldest first, and locks them, skipping those another relay holds:
-- they stay this transaction's until it commits or rolls back. A relay that dies rolls back
-- (its connection closes) and its messages are due again at once. A relay that hangs holds them
-- for the lease: `idle_in_transaction_session_timeout`, set for this transaction only, makes the
-- server end the session of a claim left idle that long.
-- The ordering placeholder below is empty, or the condition that keeps a message back while an
-- earlier message of its ordering key is pending (sql/outbox_ordering.sql).
--
-- `synchronous_commit` off commits the transaction without waiting for the disk. Its writes are
-- the deletions of published messages: one lost in a crash of the database brings its message
-- back, to be published again, which at-least-once delivery allows and the consumers' inbox
-- absorbs (docs/benchmarks.md measures what waiting for the flush would cost).
WITH held AS (
    SELECT set_config('synchronous_commit', 'off', true),
        set_config('idle_in_transaction_session_timeout', $1::bigint::text, true)
)
SELECT o.ctid::text AS row, o.id, o.seq, o.destination, o.ordering_key, o.header_names,
    o.header_values, o.payload, o.attempts
FROM "{schema}"."{table}" AS o, held
WHERE o.state = 'pending' AND o.available_at <= statement_timestamp()
{ordering}
ORDER BY o.available_at
LIMIT $2
FOR UPDATE OF o SKIP LOCKED
