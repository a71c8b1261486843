-- ? limit. The dead letters, oldest first.
SELECT id, destination, ordering_key, headers, payload, attempts,
    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', dead_at) DIV 1000 AS dead_at_millis,
    last_error
FROM {qualified}
WHERE state = 'dead'
ORDER BY dead_at, seq
LIMIT ?
