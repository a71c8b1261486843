-- $1 now, $2 and $3 the scope and key digest of the last record of the step before (empty at
-- first), $4 the step's length. One step of a census: the next $4 records in primary key order,
-- read from the primary key's index, the live ones among them counted by state. `last_scope`
-- and `last_key` are NULL once no record is left.
WITH step AS (
    SELECT scope, key, state, created_at, expires_at
    FROM "{schema}"."{table}"
    WHERE (scope, key) > ($2, $3)
    ORDER BY scope, key
    LIMIT $4
), last AS (
    SELECT scope, key FROM step ORDER BY scope DESC, key DESC LIMIT 1
), live AS (
    SELECT state, created_at FROM step WHERE {now} < expires_at
)
SELECT
    (SELECT count(*) FROM live WHERE state = 'processing') AS processing,
    (SELECT count(*) FROM live WHERE state = 'completed') AS completed,
    (SELECT (extract(epoch FROM min(created_at)) * 1000)::bigint
        FROM live WHERE state = 'processing') AS oldest_processing,
    (SELECT scope FROM last) AS last_scope,
    (SELECT key FROM last) AS last_key
