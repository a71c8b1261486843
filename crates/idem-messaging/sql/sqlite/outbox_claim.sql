-- ?1 claim token, ?2 relay name, ?3 lease in milliseconds, ?4 batch size. Runs alone in a
-- `BEGIN IMMEDIATE` transaction, under SQLite's write lock: two relays (two processes on one
-- file) never claim the same message, except once the first claim's lease has run out.
--
-- Takes up to ?4 due messages, oldest first, and writes the claim on them: its token, and the
-- end of its lease as their next due time. Until then no other claim takes them; only this
-- claim's token may then delete them (sent), record a failed attempt or give them back. A relay
-- that dies or hangs holds them until the lease ends; then another claim takes them, with a
-- token of its own, and the late relay's marks match nothing.
-- The ordering placeholder below is empty, or the condition that keeps a message back while an
-- earlier message of its ordering key is pending (sql/outbox_ordering.sql).
UPDATE "{schema}"."{table}"
SET claim = ?1,
    claimed_by = ?2,
    available_at = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + ?3
WHERE seq IN (
    SELECT o.seq
    FROM "{schema}"."{table}" AS o
    WHERE o.state = 'pending'
      AND o.available_at <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    {ordering}
    ORDER BY o.available_at
    LIMIT ?4
)
RETURNING seq, id, destination, ordering_key, headers, payload, attempts
