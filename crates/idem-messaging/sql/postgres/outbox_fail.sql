-- $1 ids, $2 errors (one per id), $3 claim token, $4 max attempts, $5 backoff base and $6 backoff
-- cap in milliseconds. Records a failed attempt of each message this claim still holds: a
-- message that has had $4 attempts goes to the dead letters, the others are due again after
-- base * 2^(attempts - 1), capped, times a random factor between 0.5 and 1 (so that messages
-- failed together do not come back together).
UPDATE "{schema}"."{table}" AS o
SET state        = CASE WHEN o.attempts >= $4 THEN 'dead' ELSE 'pending' END,
    dead_at      = CASE WHEN o.attempts >= $4 THEN statement_timestamp() END,
    claim        = NULL,
    available_at = statement_timestamp()
        + least($6::float8, $5::float8 * power(2::float8, o.attempts - 1))
          * (0.5 + random() / 2) * interval '1 millisecond',
    last_error   = f.error
FROM unnest($1::uuid[], $2::text[]) AS f(id, error)
WHERE o.id = f.id AND o.claim = $3
RETURNING o.id, o.state = 'dead' AS dead
