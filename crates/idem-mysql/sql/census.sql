-- ? now (NULL: the server's); ? id: the last record of the step before (0 at first); ? the
-- step's length. One step of a census: the next records in primary key order, read from the
-- primary key's index, the live ones among them counted by state. `last` is the step's last
-- record's id (NULL once no record is left).
SELECT
    CAST(SUM(step.live AND step.state = 'processing') AS SIGNED) AS processing,
    CAST(SUM(step.live AND step.state = 'completed') AS SIGNED) AS completed,
    MIN(CASE WHEN step.live AND step.state = 'processing' THEN step.created_at END)
        AS oldest_processing,
    MAX(step.id) AS last
FROM (
    SELECT id, state, created_at, COALESCE(?, {now}) < expires_at AS live
    FROM `{table}`
    WHERE id > ?
    ORDER BY id
    LIMIT ?
) AS step
