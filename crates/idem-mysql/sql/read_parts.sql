-- ? scope, ? key digest, ? token, ? from, ? from, ? now (NULL: the server's), ? from, ? max bytes.
-- The parts of one execution from index `from` on, in order: the unexpired ones, up to the first
-- gap, at most 256, as many as fit in `max bytes` and at least one.
--
-- The sizes are summed over the parts' index range first, without their bytes leaving the
-- server (nor a blob in the derived table, which MariaDB would materialise on disk), then only
-- the parts that fit are read, by primary key: STRAIGHT_JOIN keeps that order (left to itself,
-- the planner may scan the parts table and look each row up in the derived one).
SELECT STRAIGHT_JOIN p.part
FROM (
    SELECT scope, key_digest, token, idx,
        ROW_NUMBER() OVER (ORDER BY idx) AS n,
        SUM(LENGTH(part)) OVER (ORDER BY idx) AS through
    FROM `{table}_parts`
    WHERE scope = ? AND key_digest = ? AND token = ? AND idx >= ? AND idx < ? + 256
        AND COALESCE(?, {now}) < expires_at
) AS run
JOIN `{table}_parts` AS p
    ON p.scope = run.scope AND p.key_digest = run.key_digest AND p.token = run.token
        AND p.idx = run.idx
WHERE run.idx = ? + run.n - 1 AND (run.n = 1 OR run.through <= ?)
ORDER BY run.idx
