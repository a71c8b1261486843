-- $1 now, $2 limit. Deletes at most $2 expired records, oldest first, skipping rows that another
-- transaction holds (a concurrent purger, or a caller's transaction completing that key).
WITH doomed AS (
    SELECT scope, key
    FROM "{schema}"."{table}"
    WHERE expires_at <= {now}
    ORDER BY expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM "{schema}"."{table}" AS r
USING doomed AS d
WHERE r.scope = d.scope AND r.key = d.key
