-- $1 claim token, $2 relay name, $3 lease in milliseconds, $4 batch size, $5 max attempts.
--
-- Takes up to $4 due messages, oldest first, skipping those another relay is claiming at this
-- instant, and leases them to this claim: each becomes due again when the lease ends, so the
-- messages of a relay that died go to the others. A message already claimed $5 times (the relay
-- of its last attempt died) goes to the dead letters instead of being claimed.
-- The ordering placeholder below is empty, or the condition that keeps a message back while an
-- earlier message of its ordering key is pending (sql/postgres/outbox_ordering.sql).
--
-- The rows are found again by their physical address (`ctid`, a TID scan) rather than through
-- the primary key's index: within one statement, a row this statement locked cannot move.
--
-- `relaxed` commits the claim without waiting for the disk (asynchronous commit, for this
-- transaction only). A claim is a lease, safe to lose: if the database crashes before writing
-- it, the messages are due again at once and published again, which at-least-once delivery
-- allows and the consumers' inbox absorbs. Waiting for the flush costs the claim and the
-- mark-sent a quarter of their throughput (docs/benchmarks.md: 186 against 248 batches/s).
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true)
),
due AS (
    SELECT o.ctid AS row, o.attempts >= $5 AS exhausted
    FROM "{schema}"."{table}" AS o
    WHERE o.state = 'pending' AND o.available_at <= statement_timestamp()
    {ordering}
    ORDER BY o.available_at
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE "{schema}"."{table}" AS o
SET state        = CASE WHEN due.exhausted THEN 'dead' ELSE 'pending' END,
    attempts     = CASE WHEN due.exhausted THEN o.attempts ELSE o.attempts + 1 END,
    claim        = CASE WHEN due.exhausted THEN NULL ELSE $1 END,
    claimed_by   = $2,
    available_at = statement_timestamp() + $3::bigint * interval '1 millisecond',
    dead_at      = CASE WHEN due.exhausted THEN statement_timestamp() END,
    last_error   = CASE
        WHEN due.exhausted THEN 'the relay of the last attempt stopped before it finished'
        ELSE o.last_error
    END
FROM due, relaxed
WHERE o.ctid = due.row
RETURNING o.id, o.ctid::text AS row, o.seq, o.destination, o.ordering_key, o.header_names,
    o.header_values, o.payload, o.attempts, due.exhausted
