-- $1 now, $2 limit. Deletes at most $2 expired records and streamed parts in all: the expired
-- records first, oldest first, then as many expired parts as the rest of the limit allows, oldest
-- first. Skips rows that another transaction holds (a concurrent purger, or a caller's
-- transaction completing that key). One row: `purged`, how many rows were deleted.
WITH doomed AS (
    SELECT scope, key
    FROM "{schema}"."{table}"
    WHERE expires_at <= {now}
    ORDER BY expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
purged AS (
    DELETE FROM "{schema}"."{table}" AS r
    USING doomed AS d
    WHERE r.scope = d.scope AND r.key = d.key
    RETURNING 1
),
doomed_parts AS (
    SELECT scope, key, token, idx
    FROM "{schema}"."{table}_parts"
    WHERE expires_at <= {now}
    ORDER BY expires_at
    LIMIT greatest($2 - (SELECT count(*) FROM purged), 0)
    FOR UPDATE SKIP LOCKED
),
purged_parts AS (
    DELETE FROM "{schema}"."{table}_parts" AS p
    USING doomed_parts AS d
    WHERE p.scope = d.scope AND p.key = d.key AND p.token = d.token AND p.idx = d.idx
    RETURNING 1
)
SELECT (SELECT count(*) FROM purged) + (SELECT count(*) FROM purged_parts) AS purged
