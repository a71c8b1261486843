-- What the outbox holds, in one statement, so one read transaction: the counts add up. "Now" is
-- the same instant throughout one statement.
--
-- - pending: every message in state 'pending' (due, in flight, or waiting out a backoff);
-- - due: pending and its due time passed: what a relay claims next. That includes the messages
--   of a claim whose lease ran out, which any relay may take again;
-- - in_flight: carrying a claim's token whose lease has not run out (only pending messages
--   carry one: the state constraint);
-- - dead_letters: every message in state 'dead', counted as all rows minus the pending ones
--   (the state constraint makes each row one or the other), since no index holds the dead
--   letters alone;
-- - oldest_due_millis: the earliest due time of the pending messages, in milliseconds since
--   the Unix epoch, when it has passed (then it is a due message's); null when none is due.
--
-- Cost: the `_available` index for the pending messages, a range of it for the due ones and its
-- first entry for the earliest; the `_claim` index for the claimed ones, with a visit to each
-- one's row for its lease; the smallest index of all the rows (the ids') for the total.
SELECT pending.n AS pending,
    (SELECT count(*) FROM "{schema}"."{table}"
        WHERE state = 'pending'
          AND available_at <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    ) AS due,
    (SELECT count(*) FROM "{schema}"."{table}"
        WHERE claim IS NOT NULL
          AND available_at > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    ) AS in_flight,
    (SELECT count(*) FROM "{schema}"."{table}") - pending.n AS dead_letters,
    (SELECT CASE
            WHEN earliest <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
            THEN earliest
        END
        FROM (SELECT min(available_at) AS earliest FROM "{schema}"."{table}"
              WHERE state = 'pending')
    ) AS oldest_due_millis
FROM (SELECT count(*) AS n FROM "{schema}"."{table}" WHERE state = 'pending') AS pending
