-- $1 claimant, $2 claimed_until, $3 posted_at, $4 next_at, $5 processing, $6 completed,
-- $7 oldest_processing (times in milliseconds): the census board after a claim or a post.
UPDATE "{schema}"."{table}_census"
SET claimant = $1,
    claimed_until = 'epoch'::timestamptz + $2::bigint * interval '1 millisecond',
    posted_at = 'epoch'::timestamptz + $3::bigint * interval '1 millisecond',
    next_at = 'epoch'::timestamptz + $4::bigint * interval '1 millisecond',
    processing = $5,
    completed = $6,
    oldest_processing = 'epoch'::timestamptz + $7::bigint * interval '1 millisecond'
WHERE id = 0
