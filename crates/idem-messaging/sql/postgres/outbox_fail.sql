-- $1 row addresses (`ctid`, as the claim returned them), $2 errors (one per row), $3 max
-- attempts, $4 backoff base and $5 backoff cap in milliseconds. In the claim's transaction,
-- records a failed attempt of each message: one that has now had $3 attempts goes to the dead
-- letters, the others are due again after base * 2^(attempts - 1), capped, times a random factor
-- between 0.5 and 1 (so that messages failed together do not come back together).
UPDATE "{schema}"."{table}" AS o
SET attempts     = o.attempts + 1,
    state        = CASE WHEN o.attempts + 1 >= $3 THEN 'dead' ELSE 'pending' END,
    dead_at      = CASE WHEN o.attempts + 1 >= $3 THEN statement_timestamp() END,
    available_at = statement_timestamp()
        + least($5::float8, $4::float8 * power(2::float8, o.attempts))
          * (0.5 + random() / 2) * interval '1 millisecond',
    last_error   = f.error
FROM unnest($1::tid[], $2::text[]) AS f(row, error)
WHERE o.ctid = f.row
RETURNING o.id, o.state = 'dead' AS dead
