-- ?1 claim token, ?2 the refused messages (a JSON array of [id, error] pairs), ?3 max attempts,
-- ?4 backoff base and ?5 backoff cap in milliseconds. Records a failed attempt of each message
-- this claim still holds: one that has now had ?3 attempts goes to the dead letters, the others
-- are due again after base * 2^(attempts - 1), capped, times a random factor between 0.5 and 1
-- (so that messages failed together do not come back together). An integer product that
-- overflows becomes a real in SQLite, which the cap brings back.
UPDATE "{schema}"."{table}" AS o
SET attempts     = o.attempts + 1,
    state        = CASE WHEN o.attempts + 1 >= ?3 THEN 'dead' ELSE 'pending' END,
    dead_at      = CASE WHEN o.attempts + 1 >= ?3
                   THEN CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) END,
    available_at = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
        + CAST(min(?5, ?4 * (1 << min(o.attempts, 62)))
               * (0.5 + (random() & 1048575) / 2097152.0) AS INTEGER),
    claim        = NULL,
    claimed_by   = NULL,
    last_error   = f.error
FROM (
    SELECT json_extract(value, '$[0]') AS message, json_extract(value, '$[1]') AS error
    FROM json_each(?2)
) AS f
WHERE o.id = f.message AND o.claim = ?1
RETURNING id, state = 'dead' AS dead
