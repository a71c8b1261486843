-- $1 now. The processing records are counted from their range of the index on
-- (state, created_at), each one's expiry read from the table; the completed ones are the other
-- live records, counted from the `expires_at` index (an index-only scan, but for the pages that
-- vacuum has not marked all-visible yet). One statement, one snapshot: the counts agree.
WITH processing AS (
    SELECT count(*) AS count, min(created_at) AS oldest
    FROM "{schema}"."{table}"
    WHERE state = 'processing' AND {now} < expires_at
)
SELECT p.count AS processing,
    (SELECT count(*) FROM "{schema}"."{table}" WHERE {now} < expires_at) - p.count AS completed,
    (extract(epoch FROM p.oldest) * 1000)::bigint AS oldest_processing
FROM processing AS p
