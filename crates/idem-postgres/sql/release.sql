-- Release, by the holder of the token only, for a batch of distinct addresses. $1 now; one
-- element per release in $2 scopes, $3 keys and $4 tokens. One row, `n` the release's position
-- in the arrays (from 1), per record released; none for a token that does not hold a live
-- processing record.
WITH clock AS (
    SELECT {now} AS now
),
batch AS (
    SELECT *
    FROM unnest($2::bytea[], $3::bytea[], $4::bigint[])
        WITH ORDINALITY AS b (scope, key, token, n)
),
released AS (
    DELETE FROM "{schema}"."{table}" AS r
    USING clock AS c, batch AS b
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
FROM released
