-- Complete, by the holder of the token only. $1 now, $2 scope, $3 key, $4 token, $5 response,
-- $6 ttl in milliseconds. One row when done, none when the token does not hold a live processing
-- record. Waiters on other instances are told through the store's channel (see changes.rs), when
-- the transaction commits.
WITH clock AS (
    SELECT {now} AS now
),
completed AS (
    UPDATE "{schema}"."{table}" AS r
    SET state = 'completed',
        lease_until = NULL,
        completed_at = c.now,
        expires_at = c.now + $6::bigint * interval '1 millisecond',
        response = $5
    FROM clock AS c
    WHERE r.scope = $2 AND r.key = $3
        AND r.token = $4 AND r.state = 'processing' AND c.now < r.expires_at
    RETURNING r.scope, r.key, r.watched
)
-- Only a record that somebody found in flight (see acquire.sql) is worth a NOTIFY.
SELECT CASE WHEN watched
    THEN pg_notify('{channel}', encode(sha256(scope || key), 'hex'))
END
FROM completed
