-- $1 now. The census board's row, locked until the transaction ends, and the store's time.
SELECT claimant,
    (extract(epoch FROM claimed_until) * 1000)::bigint AS claimed_until,
    (extract(epoch FROM posted_at) * 1000)::bigint AS posted_at,
    (extract(epoch FROM next_at) * 1000)::bigint AS next_at,
    processing,
    completed,
    (extract(epoch FROM oldest_processing) * 1000)::bigint AS oldest_processing,
    (extract(epoch FROM {now}) * 1000)::bigint AS now
FROM "{schema}"."{table}_census"
WHERE id = 0
FOR UPDATE
