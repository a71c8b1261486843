-- ?1 claimant, ?2 claimed_until, ?3 posted_at, ?4 next_at, ?5 processing, ?6 completed,
-- ?7 oldest_processing: the census board after a claim or a post.
UPDATE idem_census
SET claimant = ?1, claimed_until = ?2, posted_at = ?3, next_at = ?4, processing = ?5,
    completed = ?6, oldest_processing = ?7
WHERE id = 0
