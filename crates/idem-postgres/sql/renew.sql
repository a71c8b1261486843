-- Renew, by the holder of the token only, for a batch of distinct addresses. $1 now; one element
-- per renewal in $2 scopes, $3 keys, $4 tokens and $5 leases in milliseconds. One row, `n` the
-- renewal's position in the arrays (from 1), with the new end of the lease per lease renewed;
-- none for a token that does not hold a live processing record.
WITH clock AS (
    SELECT {now} AS now
),
batch AS (
    SELECT *
    FROM unnest($2::bytea[], $3::bytea[], $4::bigint[], $5::bigint[])
        WITH ORDINALITY AS b (scope, key, token, lease, n)
)
UPDATE "{schema}"."{table}" AS r
SET lease_until = c.now + b.lease * interval '1 millisecond',
    expires_at = greatest(r.expires_at, c.now + b.lease * interval '1 millisecond')
FROM clock AS c, batch AS b
WHERE r.scope = b.scope AND r.key = b.key
    -- `IS TRUE` keeps the state out of the index conditions: the record is found by primary key,
    -- never by walking the listing's index on (state, created_at).
    AND r.token = b.token AND (r.state = 'processing') IS TRUE AND c.now < r.expires_at
RETURNING b.n, (extract(epoch FROM r.lease_until) * 1000)::bigint AS lease_until
