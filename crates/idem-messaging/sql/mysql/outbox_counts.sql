-- What the outbox holds, in one statement: the counts add up, but for a message claimed, settled
-- or enqueued in the instant between the statement's read view and its locking read.
--
-- - pending: every message in state 'pending' (due, in flight, or waiting out a backoff);
-- - due: pending, its due time passed, held by no claim: what a relay claims next;
-- - in_flight: pending, its due time passed, and held by a claim still in progress;
-- - dead_letters: every message in state 'dead', counted as all rows minus the pending ones
--   (the state constraint makes each row one or the other);
-- - oldest_due_millis: the earliest due time of the due messages, in whole milliseconds since
--   the Unix epoch; null when none is due.
--
-- A claim holds its messages as row locks, and neither MySQL nor MariaDB shows row locks in a
-- view both have: the due messages are counted twice, by a plain read (all of them) and by a
-- locking read that skips the locked ones (the free ones); the difference is held. The locking
-- read holds the free ones' locks for the instant of this statement: a claim made in that
-- instant skips them, and they wait for its relay's next cycle. (Another transaction writing a
-- message also holds it.)
--
-- Cost: the `_available` index for the pending messages and for a range of the due ones (once
-- without locks, once with), and the primary key for all the rows.
SELECT pending.n AS pending,
    free.n AS due,
    GREATEST(ready.n - free.n, 0) AS in_flight,
    (SELECT count(*) FROM {qualified}) - pending.n AS dead_letters,
    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', free.oldest) DIV 1000 AS oldest_due_millis
FROM (SELECT count(*) AS n FROM {qualified} WHERE state = 'pending') AS pending,
    (SELECT count(*) AS n FROM {qualified}
        WHERE state = 'pending' AND available_at <= UTC_TIMESTAMP(6)) AS ready,
    (SELECT count(*) AS n, min(available_at) AS oldest FROM {qualified}
        WHERE state = 'pending' AND available_at <= UTC_TIMESTAMP(6)
        FOR UPDATE SKIP LOCKED) AS free
