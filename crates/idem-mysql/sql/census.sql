-- ? now (NULL: the server's); ? scope, ? scope, ? key digest: the last record of the step
-- before (empty at first); ? the step's length. One step of a census: the next records in
-- primary key order, read from the primary key's index, the live ones among them counted by
-- state. `last` is the step's last record, scope and key digest end to end (NULL once no record
-- is left).
SELECT
    CAST(SUM(step.live AND step.state = 'processing') AS SIGNED) AS processing,
    CAST(SUM(step.live AND step.state = 'completed') AS SIGNED) AS completed,
    MIN(CASE WHEN step.live AND step.state = 'processing' THEN step.created_at END)
        AS oldest_processing,
    MAX(CONCAT(step.scope, step.key_digest)) AS last
FROM (
    SELECT scope, key_digest, state, created_at, COALESCE(?, {now}) < expires_at AS live
    FROM `{table}`
    WHERE scope > ? OR (scope = ? AND key_digest > ?)
    ORDER BY scope, key_digest
    LIMIT ?
) AS step
