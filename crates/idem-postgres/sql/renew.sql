-- Renew, by the holder of the token only. $1 now, $2 scope, $3 key, $4 token, $5 lease in
-- milliseconds. Returns the new end of the lease, or no row.
WITH clock AS (
    SELECT {now} AS now
)
UPDATE "{schema}"."{table}" AS r
SET lease_until = c.now + $5::bigint * interval '1 millisecond',
    expires_at = greatest(r.expires_at, c.now + $5::bigint * interval '1 millisecond')
FROM clock AS c
WHERE r.scope = $2 AND r.key = $3
    AND r.token = $4 AND r.state = 'processing' AND c.now < r.expires_at
RETURNING (extract(epoch FROM r.lease_until) * 1000)::bigint AS lease_until
