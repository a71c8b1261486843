-- ? now (NULL: the server's). The census board's row, locked until the transaction ends, and
-- the store's time.
SELECT claimant, claimed_until, posted_at, next_at, processing, completed, oldest_processing,
    COALESCE(?, {now}) AS now
FROM `{table}_census`
WHERE id = 0
FOR UPDATE
