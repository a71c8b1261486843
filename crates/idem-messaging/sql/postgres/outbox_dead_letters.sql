-- $1 limit. The dead letters, oldest first.
SELECT id, destination, ordering_key, header_names, header_values, payload, attempts,
    (extract(epoch FROM dead_at) * 1000)::bigint AS dead_at_millis, last_error
FROM "{schema}"."{table}"
WHERE state = 'dead'
ORDER BY dead_at, seq
LIMIT $1
