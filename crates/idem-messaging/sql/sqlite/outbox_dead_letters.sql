-- ?1 limit. The dead letters, oldest first.
SELECT id, destination, ordering_key, headers, payload, attempts, dead_at AS dead_at_millis,
    last_error
FROM "{schema}"."{table}"
WHERE state = 'dead'
ORDER BY dead_at, seq
LIMIT ?1
