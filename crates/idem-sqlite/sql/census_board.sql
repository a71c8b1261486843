-- The census board's one row.
SELECT claimant, claimed_until, posted_at, next_at, processing, completed, oldest_processing
FROM idem_census
WHERE id = 0
