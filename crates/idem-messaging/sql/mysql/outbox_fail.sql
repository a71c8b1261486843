-- ? the refused messages (a JSON array of [seq, attempts, error]: the attempts counted with this
-- one), ? max attempts twice, ? backoff cap and ? backoff base in milliseconds. In the claim's
-- transaction, records a failed attempt of each message: one that has now had max attempts goes
-- to the dead letters, the others are due again after base * 2^(attempts - 1), capped, times a
-- random factor between 0.5 and 1 (so that messages failed together do not come back together).
--
-- The claim holds the rows locked, so the attempts it read are theirs still: the new count comes
-- with the message, and no assignment reads a column another one sets (MySQL assigns left to
-- right, MariaDB may assign all at once). The join reaches the claim's rows alone, by the primary
-- key (see outbox_mark_sent.sql).
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
    seq      BIGINT PATH '$[0]',
    attempts INT    PATH '$[1]',
    error    JSON   PATH '$[2]'
)) AS f
STRAIGHT_JOIN {qualified} AS o FORCE INDEX (PRIMARY) ON o.seq = f.seq
SET o.attempts     = f.attempts,
    o.state        = IF(f.attempts >= ?, 'dead', 'pending'),
    o.dead_at      = IF(f.attempts >= ?, UTC_TIMESTAMP(6), NULL),
    o.available_at = UTC_TIMESTAMP(6) + INTERVAL CAST(
        LEAST(?, ? * POW(2, f.attempts - 1)) * (0.5 + RAND() / 2) * 1000 AS SIGNED
    ) MICROSECOND,
    o.last_error   = JSON_UNQUOTE(f.error)
