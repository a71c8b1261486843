-- $1 now, $2 scope, $3 key.
SELECT fingerprint, state, token,
    (extract(epoch FROM lease_until) * 1000)::bigint AS lease_until,
    (extract(epoch FROM created_at) * 1000)::bigint AS created_at,
    (extract(epoch FROM completed_at) * 1000)::bigint AS completed_at,
    (extract(epoch FROM expires_at) * 1000)::bigint AS expires_at,
    response
FROM "{schema}"."{table}"
WHERE scope = $2 AND key = $3 AND {now} < expires_at
