-- What the outbox holds, in one statement, so one snapshot: the counts add up.
--
-- - pending: every message in state 'pending' (due, in flight, or waiting out a backoff);
-- - due: pending, its due time passed, held by no claim: what a relay claims next;
-- - in_flight: pending and held by a claim still in progress;
-- - dead_letters: every message in state 'dead', counted as all rows minus the pending ones
--   (the state constraint makes each row one or the other), since no index holds the dead
--   letters alone;
-- - oldest_due_millis: the earliest due time of the due messages, in whole milliseconds since
--   the Unix epoch (truncated, as SQLite keeps them); null when none is due.
--
-- A claim holds its messages as row locks (FOR UPDATE), and a row lock is written on the row:
-- its `xmax` is the claiming transaction's id. That transaction holds the lock on its own id
-- until it ends, which `pg_locks` shows: a pending row whose `xmax` is the id of a transaction
-- in progress is held (by a claim, or by another transaction writing the row). A claim takes
-- only rows already due, and changes nothing a reader sees until it commits, so the rows it
-- holds are among those due now.
--
-- Cost: an index-only scan of the `_available` index for the pending messages, one of the
-- primary key for all the rows, and a visit to each due message's row (the lock is there, not in
-- an index): through a range of `_available`, or in one pass over the table when most of it is
-- due, whichever the planner finds cheaper.
WITH running AS (
    SELECT coalesce(array_agg(transactionid), ARRAY[]::xid[]) AS xids
    FROM pg_locks
    WHERE locktype = 'transactionid' AND mode = 'ExclusiveLock' AND granted
),
ready AS (
    SELECT count(*) FILTER (WHERE NOT r.held) AS due,
        count(*) FILTER (WHERE r.held) AS in_flight,
        min(r.available_at) FILTER (WHERE NOT r.held) AS oldest_due
    FROM (
        SELECT o.available_at, o.xmax = ANY(running.xids) AS held
        FROM "{schema}"."{table}" AS o, running
        WHERE o.state = 'pending' AND o.available_at <= statement_timestamp()
    ) AS r
),
pending AS (
    SELECT count(*) AS n FROM "{schema}"."{table}" WHERE state = 'pending'
)
SELECT pending.n AS pending, ready.due, ready.in_flight,
    (SELECT count(*) FROM "{schema}"."{table}") - pending.n AS dead_letters,
    floor(extract(epoch FROM ready.oldest_due) * 1000)::bigint AS oldest_due_millis
FROM pending, ready
