-- Complete, by the holder of the token only, for a batch of distinct addresses. $1 now; one
-- element per completion in $2 scopes, $3 keys, $4 tokens, $5 responses and $6 ttls in
-- milliseconds. One row, `n` the completion's position in the arrays (from 1), per record
-- completed; none for a token that does not hold a live processing record. Waiters on other
-- instances are told through the store's channel (see changes.rs), when the transaction commits.
WITH clock AS (
    SELECT {now} AS now
),
batch AS (
    SELECT *
    FROM unnest($2::bytea[], $3::bytea[], $4::bigint[], $5::bytea[], $6::bigint[])
        WITH ORDINALITY AS b (scope, key, token, response, ttl, n)
),
completed AS (
    UPDATE "{schema}"."{table}" AS r
    SET state = 'completed',
        lease_until = NULL,
        completed_at = c.now,
        expires_at = c.now + b.ttl * interval '1 millisecond',
        response = b.response
    FROM clock AS c, batch AS b
    WHERE r.scope = b.scope AND r.key = b.key
        -- `IS TRUE` keeps the state out of the index conditions: the record is found by primary
        -- key, never by walking the listing's index on (state, created_at).
        AND r.token = b.token AND (r.state = 'processing') IS TRUE AND c.now < r.expires_at
    RETURNING b.n, r.scope, r.key, r.watched
)
-- Only a record that somebody found in flight (see acquire.sql) is worth a NOTIFY.
SELECT n,
    CASE WHEN watched
        THEN pg_notify('{channel}', encode(sha256(scope || key), 'hex'))
    END AS notified
FROM completed
