-- ? claimant, ? claimed_until, ? posted_at, ? next_at, ? processing, ? completed,
-- ? oldest_processing (times in milliseconds): the census board after a claim or a post.
UPDATE `{table}_census`
SET claimant = ?, claimed_until = ?, posted_at = ?, next_at = ?, processing = ?, completed = ?,
    oldest_processing = ?
WHERE id = 0
